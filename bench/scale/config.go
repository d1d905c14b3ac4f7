package scale

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Config is what Run runs.
type Config struct {
	// Server is the sharedcontent-lockserver binary.
	Server string
	// Rollout, Steady and Restart list the fleets of each scenario.
	Rollout []int
	Steady  []int
	Restart []RestartSize
	// Blobs is the image's blob count; Download the holder's simulated
	// download; Parallel the blobs a node pulls at once.
	Blobs    int
	Download time.Duration
	Parallel int
	// ShortConns is how many keep-alive connections a node's short
	// requests (session, lock, unlock, status, references) share; 0 (the
	// default) is what a node does: lockclient's pool, a connection for
	// each request in flight (up to its maxConnsPerHost, 512), kept 90 s
	// once idle (conns).
	ShortConns int
	// SessionStream opens a node's event stream with its session
	// (lockclient.WithSessionStream), not with its first wait.
	SessionStream bool
	// OldNodes[i] is how many of rollout i's nodes are older nodes
	// (docs/design.md §10.7: the wire shape before the session timing
	// rule, internal/testutil/oldnode); none where the list is shorter.
	OldNodes []int
	// olderNodes is the current rollout's (node.go: the last ones).
	olderNodes int
	// poolConns bounds lockclient's pool of a node (ShortConns 0) in the
	// current scenario (run.go, sized); 0: lockclient's own bound.
	poolConns int
	// SessionConn, with ShortConns > 0, gives a node's session calls and
	// syncs a keep-alive connection of their own, as lockclient's pool
	// would open one rather than queue them behind the node's lock
	// requests and adds on its ShortConns; one more descriptor a node.
	SessionConn bool
	// SkipRef lists the settings of contentv2.WithSkipAddsRef (a
	// follower's skip adds its reference, docs/design.md §10.6 lever c)
	// each rollout size is run with, in order; empty: the default (off)
	// alone. Several alternate the lever in one run.
	SkipRef []bool
	// BlobSize is the size of each of the image's blobs. RetryPause is
	// the mean pause before a failed fetch is tried again. A rollout's
	// nodes wait as contentv2 waits: its own deadlines bound their calls
	// (store.go).
	BlobSize   int
	RetryPause time.Duration
	// SteadyFor is the steady scenario's period.
	SteadyFor time.Duration
	// SetupTimeout bounds the first sync of a fleet; Deadline bounds a
	// rollout and a re-sync.
	SetupTimeout time.Duration
	Deadline     time.Duration
	// Profile, if set, is a directory for CPU profiles of each
	// scenario's measured part (profile.go).
	Profile string
	// Etcd, if set, lists the endpoints of an etcd cluster: the
	// coordinator runs as a replica on it (docs/design.md §7.2), alone,
	// under a fresh prefix per scenario, and a scenario counts its etcd
	// transactions.
	Etcd []string
	// Progress, if set, is told what runs.
	Progress func(string)
}

// Defaults.
const (
	DefaultBlobs        = 10
	DefaultDownload     = 200 * time.Millisecond
	DefaultParallel     = 3 // containerd's max_concurrent_downloads
	DefaultShortConns   = 0 // lockclient's pool
	DefaultBlobSize     = 64 << 10
	DefaultRetryPause   = time.Second
	DefaultSteadyFor    = 60 * time.Second
	DefaultSetupTimeout = 15 * time.Minute
	DefaultDeadline     = 10 * time.Minute
)

// ParseSizes parses node counts ("100,1000"); empty is none.
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range fields(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 250*250*254 {
			return nil, fmt.Errorf("%q: want node counts separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// ParseCounts parses counts that may be 0 ("1000,0"); empty is none.
func ParseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range fields(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q: want counts separated by commas", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// ParseRestartSizes parses "NxR" lists ("1000x1000,1000x10000"); empty is
// none.
func ParseRestartSizes(s string) ([]RestartSize, error) {
	var out []RestartSize
	for _, f := range fields(s) {
		a, b, ok := strings.Cut(f, "x")
		n, err1 := strconv.Atoi(a)
		r, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || n < 1 || r < 1 {
			return nil, fmt.Errorf("%q: want NODESxREFERENCES separated by commas", s)
		}
		out = append(out, RestartSize{Nodes: n, Refs: r})
	}
	return out, nil
}

// ParseSwitches parses a list of "on" and "off" ("off,on"); empty is
// none.
func ParseSwitches(s string) ([]bool, error) {
	var out []bool
	for _, f := range fields(s) {
		switch f {
		case "on":
			out = append(out, true)
		case "off":
			out = append(out, false)
		default:
			return nil, fmt.Errorf("%q: want on or off, separated by commas", s)
		}
	}
	return out, nil
}

func fields(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// ConnsText says how a node's short requests reach the coordinator, for
// the doc.
func (cfg Config) ConnsText() string {
	if cfg.ShortConns == 0 {
		return "lockclient's pool for its short requests: a keep-alive connection for each request in flight, kept 90 s once idle"
	}
	return fmt.Sprintf("%d keep-alive connection(s) for its short requests, taking turns, one more for a holder's unlocks and keepalives, as lockclient's pool would open one rather than queue them", cfg.ShortConns)
}
