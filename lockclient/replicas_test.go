package lockclient

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// hostCounter is the short-request client of a Client with several URLs:
// it counts requests by "host METHOD /path".
type hostCounter struct {
	base *fasthttp.Client
	mu   sync.Mutex
	n    map[string]int // protected by mu
}

func newHostCounter(t *testing.T) *hostCounter {
	c := &hostCounter{base: &fasthttp.Client{}, n: map[string]int{}}
	t.Cleanup(c.base.CloseIdleConnections)
	return c
}

func (c *hostCounter) DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	c.mu.Lock()
	c.n[string(req.URI().Host())+" "+string(req.Header.Method())+" "+string(req.URI().Path())]++
	c.mu.Unlock()
	return c.base.DoDeadline(req, resp, deadline)
}

// count is how many requests "METHOD /path" went to the coordinator at
// base (a URL).
func (c *hostCounter) count(base, k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[strings.TrimPrefix(base, "http://")+" "+k]
}

// total counts "METHOD /path" requests to every host.
func (c *hostCounter) total(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for key, v := range c.n {
		if strings.HasSuffix(key, " "+k) {
			n += v
		}
	}
	return n
}

func urlsOf(rs []*lockservertest.Replica, order ...int) string {
	var out []string
	for _, i := range order {
		out = append(out, rs[i].URL())
	}
	return strings.Join(out, ",")
}

// TestListReachesLeader: a client given the replicas in any order reaches
// the leader; a standby first costs one request there and no retry (its
// hint is followed at once), and the client then sticks to the leader.
// /readyz is 200 on the leader only.
func TestListReachesLeader(t *testing.T) {
	rs := lockservertest.StartReplicas(t, 3)
	lockservertest.SetLeader(rs, 1)
	for i, r := range rs {
		resp, err := http.Get(r.URL() + "/readyz")
		require.NoError(t, err)
		resp.Body.Close()
		want := http.StatusServiceUnavailable
		if i == 1 {
			want = http.StatusOK
		}
		require.Equal(t, want, resp.StatusCode, "readyz of replica %d", i)
	}
	for n, order := range [][]int{{0, 1, 2}, {1, 0, 2}, {2, 0, 1}, {2, 1, 0}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			hc := newHostCounter(t)
			c := newHTTPClient(t, urlsOf(rs, order...), fmt.Sprintf("node-%d", n), WithShortClient(hc))
			members.Open(t, rs[1].Core(), fmt.Sprintf("node-%d", n)) // at the leader
			id := fmt.Sprintf("%s-%d", blob, n)
			res, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: id})
			require.NoError(t, err)
			require.True(t, res.Acquired)
			require.Zero(t, c.pauses.Load(), "a hint costs no retry")
			require.Equal(t, 1, hc.count(rs[1].URL(), "POST /lock"))
			standbyFirst := 0
			if order[0] != 1 {
				standbyFirst = 1
			}
			require.EqualValues(t, standbyFirst, c.http.hintsFollowed.Load())
			require.Equal(t, 1+standbyFirst, hc.total("POST /lock"))

			// Sticks: the unlock goes straight to the leader.
			require.NoError(t, c.Unlock(context.Background(), res.Lease, true, nil))
			require.Equal(t, 1, hc.total("POST /unlock"))
			require.Equal(t, 1, hc.count(rs[1].URL(), "POST /unlock"))
			st, err := rs[1].Core().Status(context.Background(), api.OperationPull, id, "", "")
			require.NoError(t, err)
			require.NotNil(t, st.Completed, "the leader recorded the pull")
		})
	}
}

// TestLeadershipSwitch: the leader becomes a standby and another replica
// leads. The old leader ends its event streams; a waiter on it reconnects,
// follows the hint and is granted by the new leader; session and lock
// calls go there.
func TestLeadershipSwitch(t *testing.T) {
	rs := lockservertest.StartReplicas(t, 2)
	list := urlsOf(rs, 0, 1)
	holder := newHTTPClient(t, list, "holder")
	waiter := newHTTPClient(t, list, "waiter")
	held, err := holder.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.NoError(t, err)
	require.True(t, held.Acquired)
	queued := make(chan struct{}, 1)
	waiter.http.onQueued = func(api.LockRequest) {
		select {
		case queued <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ch := lockAsync(ctx, waiter, api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	signalled(t, queued)
	requireWaiting(t, ch, "waiter")

	lockservertest.SetLeader(rs, 1)
	o := recv(t, ch)
	require.NoError(t, o.err)
	require.True(t, o.res.Acquired, "granted by the new leader, where nobody holds the lock")
	st, err := rs[1].Core().Status(context.Background(), api.OperationPull, blob, "", "")
	require.NoError(t, err)
	require.Equal(t, "waiter", st.Holder.NodeID)
	require.GreaterOrEqual(t, waiter.http.hintsFollowed.Load(), int64(1))
	require.Eventually(t, func() bool { return nodeStreamsOpen(t, rs[0].URL()) == 0 }, testTimeout, time.Millisecond,
		"the old leader ended its streams")
	require.Equal(t, 1, nodeStreamsOpen(t, rs[1].URL()), "the node stream opened again, on the new leader (it lingers after the wait)")

	resp, err := waiter.Session(context.Background(), api.SessionRequest{InstanceID: "i1"})
	require.NoError(t, err)
	require.Equal(t, rs[1].Core().Cluster().Epoch, resp.Epoch)
	nodes, err := rs[1].Core().Nodes(context.Background())
	require.NoError(t, err)
	require.Len(t, nodes.Nodes, 1, "the session is the new leader's")
	require.NoError(t, waiter.Unlock(context.Background(), o.res.Lease, true, nil))
}

// TestHintLoopBounded: two standbys that name each other cost
// 1+maxHintFollows requests per attempt, and the attempts are the normal
// retries, with their pauses.
func TestHintLoopBounded(t *testing.T) {
	rs := lockservertest.StartReplicas(t, 2)
	rs[0].Leadership.Set(false, rs[1].URL())
	rs[1].Leadership.Set(false, rs[0].URL())
	hc := newHostCounter(t)
	const retries = 2
	c := newHTTPClient(t, urlsOf(rs, 0, 1), "node-a", WithShortClient(hc), WithMaxRetries(retries))
	_, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.ErrorIs(t, err, api.ErrUnavailable)
	require.ErrorIs(t, err, api.ErrNotLeader)
	require.Equal(t, (1+retries)*(1+maxHintFollows), hc.total("POST /lock"))
	require.EqualValues(t, retries, c.pauses.Load())
}

// TestUnreachableFirstURL: a first URL that refuses connections costs one
// attempt and one pause; the client then sticks to the leader.
func TestUnreachableFirstURL(t *testing.T) {
	rs := lockservertest.StartReplicas(t, 1)
	down := "http://" + lockservertest.FreeAddr(t)
	hc := newHostCounter(t)
	c := newHTTPClient(t, down+","+rs[0].URL(), "node-a", WithShortClient(hc))
	members.Open(t, rs[0].Core(), "node-a")
	res, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.EqualValues(t, 1, c.pauses.Load())
	require.EqualValues(t, 1, c.http.movedOn.Load())
	require.NoError(t, c.Unlock(context.Background(), res.Lease, true, nil))
	require.Equal(t, 1, hc.count(down, "POST /lock"))
	require.Zero(t, hc.count(down, "POST /unlock"), "sticks to the leader")
	require.EqualValues(t, 1, c.pauses.Load())
}

// TestHintOutsideListNotFollowed: a standby that names a URL the client
// was not given is not followed there: the client moves to the next URL
// of its own list after a pause.
func TestHintOutsideListNotFollowed(t *testing.T) {
	rs := lockservertest.StartReplicas(t, 3)
	elsewhere := rs[2].URL() // a real coordinator, leading, but not listed
	rs[0].Leadership.Set(false, elsewhere)
	rs[1].Leadership.Set(true, "")
	rs[2].Leadership.Set(true, "")
	hc := newHostCounter(t)
	c := newHTTPClient(t, urlsOf(rs, 0, 1), "node-a", WithShortClient(hc))
	res, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.NoError(t, err)
	require.True(t, res.Acquired)
	require.Zero(t, hc.count(elsewhere, "POST /lock"), "no request went to the unlisted host")
	require.Zero(t, c.http.hintsFollowed.Load())
	require.EqualValues(t, 1, c.pauses.Load())
	require.Equal(t, 1, hc.count(rs[1].URL(), "POST /lock"))
}

// TestSingleURLUnchanged: with one URL a not_leader answer is retried
// like any 503, on the same URL; the hint is not followed.
func TestSingleURLUnchanged(t *testing.T) {
	rs := lockservertest.StartReplicas(t, 2)
	hc := newHostCounter(t)
	c := newHTTPClient(t, rs[1].URL(), "node-a", WithShortClient(hc), WithMaxRetries(1))
	_, err := c.Lock(context.Background(), api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.ErrorIs(t, err, api.ErrNotLeader)
	require.Equal(t, 2, hc.count(rs[1].URL(), "POST /lock"))
	require.Zero(t, hc.count(rs[0].URL(), "POST /lock"))
}

// TestBadURLLists: a bad list is refused, naming the bad URL.
func TestBadURLLists(t *testing.T) {
	for list, want := range map[string]string{
		"":                                  "empty coordinator URL",
		"http://a:1,,http://b:1":            "empty coordinator URL",
		"http://a:1,":                       "empty coordinator URL",
		"http://a:1,ftp://b:1":              `"ftp://b:1"`,
		"http://a:1,http://b:1?x=1":         `"http://b:1?x=1"`,
		"http://a:1,http://A:1/":            `"http://A:1/" is listed twice`,
		"http://a:80,http://a":              `"http://a" is listed twice`,
		"http://a:1,https://b:1":            `"https://b:1" is https while the first is http`,
		"http://a:1, http://b:1, b.example": `"b.example"`,
	} {
		_, err := New(list, WithNodeID("n"))
		require.ErrorIs(t, err, api.ErrInvalidArgument, list)
		require.ErrorContains(t, err, want, list)
	}
	got, err := ParseURLs(" http://a:1/p/ ,https://b:2")
	require.Error(t, err, "one scheme for all")
	got, err = ParseURLs(" http://a:1/p/ , http://b:2")
	require.NoError(t, err)
	require.Equal(t, []string{"http://a:1/p", "http://b:2"}, got)
}

// TestReplicaRoles: Replicas reports each configured URL's role, in the
// order given.
func TestReplicaRoles(t *testing.T) {
	rs := lockservertest.StartReplicas(t, 2)
	down := "http://" + lockservertest.FreeAddr(t)
	c := newHTTPClient(t, urlsOf(rs, 1, 0)+","+down, "node-a")
	roles := c.Replicas(context.Background())
	require.Len(t, roles, 3)
	require.Equal(t, ReplicaRole{URL: rs[1].URL(), Role: RoleStandby, Leader: rs[0].URL()}, roles[0])
	require.Equal(t, ReplicaRole{URL: rs[0].URL(), Role: RoleLeader}, roles[1])
	require.Equal(t, down, roles[2].URL)
	require.Equal(t, RoleUnreachable, roles[2].Role)
	require.NotEmpty(t, roles[2].Error)
}

// nodeStreamsOpen reads the node streams open at the coordinator at base
// from its /metrics.
func nodeStreamsOpen(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, `sharedcontent_event_streams_open{kind="node"} `); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no node stream gauge in %s/metrics", base)
	return 0
}
