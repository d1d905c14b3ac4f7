package httpserver

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Event streams hold a connection each for as long as they last, so they
// are bounded apart from connections (docs/design.md §10.3): in all, per IP address
// and per node, below the connection limits, so that streams cannot take
// every connection a node's plain requests need. A stream over a limit is
// refused with 429; lockclient then polls /lock/status, whose answers are
// bounded.
//
// A node needs one stream, /lock/events, for all its waits (docs/design.md
// §10.1), so the limit in all follows the
// number of members: StreamsPerMember per member plus StreamSlack, never
// more than the fixed limit derived from the connection limits. An older
// node (docs/design.md §10.7) waits on a stream per waiting request
// (/lock/subscribe): those count against a share of their own,
// OlderStreamsPerMember per older member, added to the limit in all, so
// that older and current nodes' streams do not crowd each other out.

// Default stream limits of a Handler. A Server uses half of its
// connection limits for the first two.
const (
	DefaultMaxStreams        = 8192
	DefaultMaxStreamsPerIP   = 512
	DefaultMaxStreamsPerNode = 512
)

const (
	// StreamsPerMember is the streams counted per member in the limit in
	// all: a node's stream, and the next one while a reconnect overlaps
	// the old one's end (or an old node's stream per waiting request).
	StreamsPerMember = 2
	// StreamSlack is added to the members' share: nodes not yet members
	// (a stream may come before the first session) and operators watching
	// keys.
	StreamSlack = 256
	// OlderStreamsPerMember is the per-request streams counted per older
	// member: containerd pulls three layers at once
	// (max_concurrent_downloads), each wait a stream, and one more
	// while a re-subscription overlaps the old stream's end.
	OlderStreamsPerMember = 4
)

// Kinds of event streams, as the metrics label them.
const (
	streamOfRequest = "request" // /lock/subscribe (one request, or a key)
	streamOfNode    = "node"    // /lock/events
)

// streamLimiter counts open event streams, in all, per client IP and per
// node.
type streamLimiter struct {
	total, perIP, perNode int
	// members, when set, counts the members and the older ones among
	// them, and tells whether node is one: the limit in all is then
	// StreamsPerMember for each plus StreamSlack, plus the older
	// members' share (OlderStreamsPerMember each), up to total.
	members func(node string) (members, older int, nodeOlder bool)

	mu     sync.Mutex
	open   int            // protected by mu
	older  int            // of open, the older members' share's; protected by mu
	byKind map[string]int // protected by mu
	byIP   map[string]int // protected by mu
	byNode map[string]int // protected by mu
}

func newStreamLimiter(total, perIP, perNode int) *streamLimiter {
	return &streamLimiter{total: total, perIP: perIP, perNode: perNode,
		byKind: map[string]int{}, byIP: map[string]int{}, byNode: map[string]int{}}
}

// limits returns the limits in effect now.
func (l *streamLimiter) limits() api.StreamLimits {
	lim, _ := l.limitsFor("")
	return lim
}

// limitsFor returns the limits in effect now, and whether node is an
// older member.
func (l *streamLimiter) limitsFor(node string) (api.StreamLimits, bool) {
	lim := api.StreamLimits{Total: l.total, PerIP: l.perIP, PerNode: l.perNode}
	if l.members == nil {
		return lim, false
	}
	var nodeOlder bool
	lim.Members, lim.Older, nodeOlder = l.members(node)
	// An older node opens no node stream: its share is of its own. Under
	// the fixed limit, the current nodes' part comes first.
	current := StreamsPerMember*(lim.Members-lim.Older) + StreamSlack
	lim.Total = min(l.total, current+OlderStreamsPerMember*lim.Older)
	lim.OlderShare = max(0, min(OlderStreamsPerMember*lim.Older, lim.Total-current))
	return lim, nodeOlder
}

// acquire counts a stream of kind from ip, for node (may be empty), in, or
// refuses it with an error matching api.ErrTooManyRequests. release must be
// called once the stream is over. An older member's per-request stream
// counts against the older members' share, every other stream against
// the rest of the limit in all.
func (l *streamLimiter) acquire(ip, node, kind string) (release func(), err error) {
	lim, nodeOlder := l.limitsFor(node) // before mu: counting members takes their mutex
	older := nodeOlder && kind == streamOfRequest
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case older && l.older >= lim.OlderShare:
		return nil, fmt.Errorf("%d event streams open for older nodes' waits (their share, %d, for %d older members); poll /lock/status or retry later: %w",
			l.older, lim.OlderShare, lim.Older, api.ErrTooManyRequests)
	case !older && l.open-l.older >= lim.Total-lim.OlderShare:
		return nil, fmt.Errorf("%d event streams open (the limit), for %d members (besides %d kept for older nodes' waits); poll /lock/status or retry later: %w",
			l.open-l.older, lim.Members, lim.OlderShare, api.ErrTooManyRequests)
	case l.open >= lim.Total:
		return nil, fmt.Errorf("%d event streams open (the limit), for %d members; poll /lock/status or retry later: %w", l.open, lim.Members, api.ErrTooManyRequests)
	case l.byIP[ip] >= l.perIP:
		return nil, fmt.Errorf("%d event streams open from %s (the per-IP limit); poll /lock/status or retry later: %w", l.byIP[ip], ip, api.ErrTooManyRequests)
	case node != "" && l.byNode[node] >= l.perNode:
		return nil, fmt.Errorf("%d event streams open for node %s (the per-node limit); poll /lock/status or retry later: %w", l.byNode[node], node, api.ErrTooManyRequests)
	}
	l.open++
	if older {
		l.older++
	}
	l.byKind[kind]++
	l.byIP[ip]++
	if node != "" {
		l.byNode[node]++
	}
	var once sync.Once
	return func() { once.Do(func() { l.release(ip, node, kind, older) }) }, nil
}

func (l *streamLimiter) release(ip, node, kind string, older bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if older {
		l.older--
	}
	l.byKind[kind]--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
	if node != "" {
		if l.byNode[node]--; l.byNode[node] <= 0 {
			delete(l.byNode, node)
		}
	}
}

// openOf counts the open streams of kind.
func (l *streamLimiter) openOf(kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byKind[kind]
}

var (
	streamsOpenDesc = prometheus.NewDesc("sharedcontent_event_streams_open",
		"Event streams open now, by kind: node (/lock/events, one per node) or request (/lock/subscribe).",
		[]string{"kind"}, nil)
	streamsLimitDesc = prometheus.NewDesc("sharedcontent_event_streams_limit",
		"Event-stream limits in effect: total (follows the member count), older_share (of total, kept for older nodes' per-request streams), per_ip, per_node.",
		[]string{"scope"}, nil)
)

// Describe and Collect make streamLimiter a prometheus.Collector of the
// open streams and the limits in effect.
func (l *streamLimiter) Describe(ch chan<- *prometheus.Desc) {
	ch <- streamsOpenDesc
	ch <- streamsLimitDesc
}

func (l *streamLimiter) Collect(ch chan<- prometheus.Metric) {
	lim := l.limits()
	l.mu.Lock()
	node, request := l.byKind[streamOfNode], l.byKind[streamOfRequest]
	l.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(streamsOpenDesc, prometheus.GaugeValue, float64(node), streamOfNode)
	ch <- prometheus.MustNewConstMetric(streamsOpenDesc, prometheus.GaugeValue, float64(request), streamOfRequest)
	ch <- prometheus.MustNewConstMetric(streamsLimitDesc, prometheus.GaugeValue, float64(lim.Total), "total")
	ch <- prometheus.MustNewConstMetric(streamsLimitDesc, prometheus.GaugeValue, float64(lim.OlderShare), "older_share")
	ch <- prometheus.MustNewConstMetric(streamsLimitDesc, prometheus.GaugeValue, float64(lim.PerIP), "per_ip")
	ch <- prometheus.MustNewConstMetric(streamsLimitDesc, prometheus.GaugeValue, float64(lim.PerNode), "per_node")
}
