package lockclient

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

const (
	// DefaultMaxRetries is how many times a call is retried after a network
	// error, a timeout or a 5xx (so at most 1+3 attempts). With
	// DefaultRetryInterval that rides out a coordinator restart of a few
	// seconds, yet gives up soon enough that a caller with a fallback is
	// not stalled for long.
	DefaultMaxRetries = 3
	// DefaultRetryInterval is the mean pause between two attempts: long
	// enough for a restarting coordinator to bind its port, short next to a
	// blob download.
	DefaultRetryInterval = time.Second
	// DefaultRequestTimeout bounds one short request (lock, unlock,
	// keepalive, cancel, status, refs). A healthy coordinator answers in
	// about a millisecond (one bbolt fsync at most); ten seconds tolerates
	// a stalled disk or a long GC pause without hanging a caller forever.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultPollInterval is how often a waiter polls /lock/status when
	// Server-Sent Events cannot be used (docs/design.md §4). It is well
	// under the coordinator's claim timeout (3 s), so a grant made to a
	// polling waiter is picked up before it is taken back.
	DefaultPollInterval = 500 * time.Millisecond
)

const (
	// fallbackLeaseTTL is used if a grant does not state its TTL: the
	// coordinator's default.
	fallbackLeaseTTL = 15 * time.Second
	// streamIdleTimeout ends an event stream that has been silent this
	// long: the coordinator sends a comment every 15 s, so three missed
	// heartbeats mean a dead peer (a half-open TCP connection never
	// errors by itself).
	streamIdleTimeout = 45 * time.Second
	// streamEndTimeout bounds the wait for a stream's end after its
	// outcome: the coordinator ends it in the same write, and reading it to
	// the end lets the connection carry the next request. A stream that
	// does not end is cut (and its connection closed) instead.
	streamEndTimeout = 100 * time.Millisecond
	// maxStreamDrops is how many times the event stream of one wait may
	// end without an outcome before the waiter falls back to polling (a
	// proxy that cuts streams would otherwise make it re-queue in a loop).
	maxStreamDrops = 3
	// maxIdleConnsPerHost keeps connections of event streams to the one
	// coordinator open for reuse. net/http's default of 2 would make a
	// node with many concurrent waits (every layer of an image at once)
	// open and close a TCP connection per wait.
	maxIdleConnsPerHost = 128
	// maxConnsPerHost bounds the connections of short requests; calls
	// beyond it wait for one to be free.
	maxConnsPerHost = 512
	// dialTimeout bounds connecting to the coordinator.
	dialTimeout = 5 * time.Second
)

// Option configures a Client.
type Option func(*options)

// options are a Client's settings; defaults come from defaultOptions.
type options struct {
	nodeID         string
	maxRetries     int
	retryInterval  time.Duration
	requestTimeout time.Duration
	pollInterval   time.Duration
	short          ShortClient
	long           *http.Client
	token          string
	tlsConfig      *tls.Config
	// sessionStream: the node's event stream opens with its session
	// (WithSessionStream), not with its first wait.
	sessionStream bool
	// perRequestStreams: each wait on a stream of its own
	// (WithPerRequestStreams).
	perRequestStreams bool
}

func defaultOptions() options {
	return options{
		maxRetries:     DefaultMaxRetries,
		retryInterval:  DefaultRetryInterval,
		requestTimeout: DefaultRequestTimeout,
		pollInterval:   DefaultPollInterval,
	}
}

func (o *options) validate() error {
	switch {
	case o.nodeID == "":
		return fmt.Errorf("lockclient: node ID is empty: %w", api.ErrInvalidArgument)
	case o.maxRetries < 0:
		return fmt.Errorf("lockclient: max retries %d is negative: %w", o.maxRetries, api.ErrInvalidArgument)
	case o.retryInterval <= 0:
		return fmt.Errorf("lockclient: retry interval %s must be positive: %w", o.retryInterval, api.ErrInvalidArgument)
	case o.requestTimeout <= 0:
		return fmt.Errorf("lockclient: request timeout %s must be positive: %w", o.requestTimeout, api.ErrInvalidArgument)
	case o.pollInterval <= 0:
		return fmt.Errorf("lockclient: poll interval %s must be positive: %w", o.pollInterval, api.ErrInvalidArgument)
	}
	return nil
}

// WithNodeID sets the node this client speaks for: the holder of its locks
// and the reference its AddRef records. The default is the host name.
func WithNodeID(id string) Option { return func(o *options) { o.nodeID = id } }

// WithMaxRetries sets how many times a call is retried after a transient
// error (network, timeout, 5xx); 0 disables retries. Refusals (4xx) are
// never retried. Default DefaultMaxRetries.
func WithMaxRetries(n int) Option { return func(o *options) { o.maxRetries = n } }

// WithRetryInterval sets the mean pause between attempts; each pause is
// drawn from [d/2, 3d/2). Default DefaultRetryInterval.
func WithRetryInterval(d time.Duration) Option { return func(o *options) { o.retryInterval = d } }

// WithRequestTimeout bounds each short request, and the first event of a
// stream. Default DefaultRequestTimeout.
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.requestTimeout = d } }

// WithPollInterval sets how often a waiter polls when event streams cannot
// be used. Default DefaultPollInterval.
func WithPollInterval(d time.Duration) Option { return func(o *options) { o.pollInterval = d } }

// WithShortClient replaces the HTTP client of short requests (a
// *fasthttp.HostClient, for instance one that dials through a proxy).
// Requests are bounded by WithRequestTimeout; WithTLSConfig does not apply
// to it. With several coordinator URLs it serves all of them, so it must
// reach each one's host (a *fasthttp.Client does; a HostClient dials one).
func WithShortClient(c ShortClient) Option { return func(o *options) { o.short = c } }

// WithLongClient replaces the HTTP client of event streams. It must not
// have a timeout (streams last as long as a wait); WithTLSConfig does not
// apply to it.
func WithLongClient(c *http.Client) Option { return func(o *options) { o.long = c } }

// WithSessionStream opens the node's event stream with its session and
// keeps it while the session is held (docs/design.md §10.6), instead of
// opening it with the node's first wait and closing it a while after its
// last (the default). A burst of waits then finds it live, and no waiter
// learns its outcome by /lock/status because the stream came up after
// it; the coordinator holds one idle stream per member for it (at 5,000
// members, beyond the 250 MB its steady state is bounded to).
func WithSessionStream() Option { return func(o *options) { o.sessionStream = true } }

// WithPerRequestStreams waits on a stream per queued request
// (/lock/subscribe), as clients before the node's one event stream did,
// instead of on the node's stream (/lock/events). It is the older nodes'
// shape, for mixed-version tests and the scale benchmark's older nodes
// (docs/design.md §10.7); a node has no reason to use it.
func WithPerRequestStreams() Option { return func(o *options) { o.perRequestStreams = true } }

// WithBearerToken sends "Authorization: Bearer <token>" with every request.
// Surrounding white space (a token file's newline) is dropped.
func WithBearerToken(token string) Option {
	return func(o *options) { o.token = strings.TrimSpace(token) }
}

// WithTLSConfig sets the TLS configuration (CA, client certificate for
// mTLS) of the built-in HTTP clients. The config is cloned.
func WithTLSConfig(c *tls.Config) Option {
	return func(o *options) { o.tlsConfig = c.Clone() }
}
