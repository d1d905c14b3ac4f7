package lockclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// A Client may be given several coordinator URLs, the replicas of one
// coordinator (docs/design.md §4, §7): one leads, the others are standbys
// that answer 503 not_leader, naming the leader when they know it. The
// Client sticks to the replica that answered last as leader; on not_leader
// naming a configured replica it sends the request there at once, without
// a retry or a pause; on any other transient failure it moves to the next
// URL, which the retry then tries after its jittered pause.
//
// Only a hint that names one of the configured URLs is followed: a
// standby (or whoever answers in its place) cannot send the node's token to
// a host its operator did not list (docs/security.md).

// maxHintFollows bounds the not_leader hints one attempt follows: a hint
// loop between two confused standbys costs a few requests, then the
// normal retry (with its pause) takes over.
const maxHintFollows = 2

// replica is one coordinator URL of a Client's list, with its own client
// of short requests.
type replica struct {
	base  string            // the URL without a trailing slash
	norm  string            // normalBase of it: what hints are compared with
	urls  map[string]string // path → base+path, for the short requests' paths
	short ShortClient
}

// ParseURLs splits a --coordinator value, one URL or a comma-separated
// list of the replicas of one coordinator, and checks each: http(s)://host[:port][/path],
// no query, no fragment, no duplicate, one scheme for all. The error names
// the bad URL. One URL gives a list of one, as before lists.
func ParseURLs(list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	scheme := ""
	for _, raw := range strings.Split(list, ",") {
		s := strings.TrimSpace(raw)
		u, err := parseURL(s)
		if err != nil {
			if strings.Contains(list, ",") {
				return nil, fmt.Errorf("lockclient: coordinator URL list %q: %w", list, err)
			}
			return nil, fmt.Errorf("lockclient: %w", err)
		}
		base := normalBase(u)
		switch {
		case seen[base]:
			return nil, fmt.Errorf("lockclient: coordinator URL list %q: %q is listed twice: %w", list, s, api.ErrInvalidArgument)
		case scheme != "" && u.Scheme != scheme:
			return nil, fmt.Errorf("lockclient: coordinator URL list %q: %q is %s while the first is %s; the replicas of one coordinator speak one scheme: %w",
				list, s, u.Scheme, scheme, api.ErrInvalidArgument)
		}
		seen[base], scheme = true, u.Scheme
		out = append(out, strings.TrimRight(u.String(), "/"))
	}
	return out, nil
}

// parseURL checks one coordinator URL.
func parseURL(s string) (*url.URL, error) {
	if s == "" {
		return nil, fmt.Errorf("empty coordinator URL: want http(s)://host[:port][/path]: %w", api.ErrInvalidArgument)
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("server URL %q: %w: %w", s, api.ErrInvalidArgument, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("server URL %q: want http(s)://host[:port][/path]: %w", s, api.ErrInvalidArgument)
	}
	return u, nil
}

// normalBase is the form of a URL that hints are compared in: scheme and
// host in lower case, the default port spelled out, no trailing slash.
func normalBase(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return strings.ToLower(u.Scheme) + "://" + host + ":" + port + strings.TrimRight(u.EscapedPath(), "/")
}

// onLeader runs fn (one request) on the replica believed to lead, and
// again on the replica a not_leader answer names, at most maxHintFollows
// times (after). An error after ctx ended says nothing of the replica.
func onLeader[T any](ctx context.Context, tr *httpTransport, fn func(*replica) (T, error)) (T, error) {
	i := tr.current()
	for hints := 0; ; hints++ {
		v, err := fn(tr.replicas[i])
		if ctx.Err() != nil {
			return v, err
		}
		next, follow := tr.after(i, err)
		if !follow || hints >= maxHintFollows {
			return v, err
		}
		i = next
	}
}

// replicaOf returns the index of the configured replica that the hint
// names, or -1: a hint outside the list is not followed.
func (tr *httpTransport) replicaOf(hint string) int {
	u, err := url.Parse(hint)
	if hint == "" || err != nil || u.Host == "" {
		return -1
	}
	want := normalBase(u)
	for i, r := range tr.replicas {
		if r.norm == want {
			return i
		}
	}
	return -1
}

// current is the replica believed to lead.
func (tr *httpTransport) current() int { return int(tr.cur.Load()) }

// after records the outcome of a request to replica i and says where the
// same attempt goes next: to the replica a not_leader hint names (true),
// or nowhere (false). A success makes i the current replica; a transient
// failure (not_leader without a usable hint, a network error, a 5xx)
// moves the current replica on from i, for the retry after its pause.
func (tr *httpTransport) after(i int, err error) (next int, follow bool) {
	if len(tr.replicas) == 1 {
		return i, false
	}
	if err == nil {
		tr.cur.Store(int32(i))
		return i, false
	}
	var nl *api.NotLeaderError
	if errors.As(err, &nl) {
		if j := tr.replicaOf(nl.Leader); j >= 0 && j != i {
			tr.cur.Store(int32(j))
			tr.hintsFollowed.Add(1)
			return j, true
		}
		tr.moveOn(i)
		return i, false
	}
	var se *statusError
	if !retryable(err) || (errors.As(err, &se) && se.status < 500) {
		return i, false // a refusal, or a busy leader (429): stay
	}
	tr.moveOn(i)
	return i, false
}

// moveOn makes the replica after i current, unless another call has moved
// on already.
func (tr *httpTransport) moveOn(i int) {
	if tr.cur.CompareAndSwap(int32(i), int32((i+1)%len(tr.replicas))) {
		tr.movedOn.Add(1)
	}
}

// Roles of a configured coordinator URL, as Replicas reports them.
const (
	RoleLeader      = "leader"
	RoleStandby     = "standby"
	RoleUnready     = "unready"
	RoleUnreachable = "unreachable"
)

// ReplicaRole is what one configured coordinator URL answered to /readyz.
type ReplicaRole struct {
	URL string `json:"url"`
	// Role is RoleLeader (ready), RoleStandby, RoleUnready (it answers
	// but is not ready: shutting down, its disk full) or RoleUnreachable.
	Role string `json:"role"`
	// Leader is a standby's leader, when it knows it.
	Leader string `json:"leader,omitempty"`
	// Error says why a replica is unready or unreachable.
	Error string `json:"error,omitempty"`
}

// Replicas asks every configured coordinator URL for its role (its
// /readyz), once each, in the order given. Nil for an embedded
// coordinator.
func (c *Client) Replicas(ctx context.Context) []ReplicaRole {
	if c.http == nil {
		return nil
	}
	tr := c.http
	roles := make([]ReplicaRole, len(tr.replicas))
	for i, r := range tr.replicas {
		roles[i] = ReplicaRole{URL: r.base, Role: RoleLeader}
		err := tr.doOn(ctx, r, http.MethodGet, "/readyz", nil, nil, nil)
		var nl *api.NotLeaderError
		var se *statusError
		switch {
		case err == nil:
		case errors.As(err, &nl):
			roles[i].Role, roles[i].Leader = RoleStandby, nl.Leader
		case errors.As(err, &se):
			roles[i].Role, roles[i].Error = RoleUnready, err.Error()
		default:
			roles[i].Role, roles[i].Error = RoleUnreachable, err.Error()
		}
	}
	return roles
}
