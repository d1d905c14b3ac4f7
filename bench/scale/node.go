package scale

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/testutil/oldnode"
	"github.com/sharedcontent/sharedcontent/lockclient"
)

// node is one simulated node: its node ID, its clients bound to its own
// loopback address, its journal, and its session state.
type node struct {
	id       string
	client   *lockclient.Client
	short    *shortClient          // client's short requests
	stream   *streamTransport      // client's event streams
	coord    contentv2.Coordinator // contentv2's view of the coordinator, over client
	instance string                // random per "daemon start", as contentv2's

	// The node as contentv2 (store.go), in a rollout: its store and
	// counters, the rollout's image, the coordination calls that failed
	// without an answer, and the writers answered ErrUnavailable.
	store         contentv2.Store
	reg           *prometheus.Registry
	img           atomic.Pointer[image]
	failedCalls   atomic.Int64
	failedErr     atomic.Pointer[string] // the first failed call's error
	writerRetries atomic.Int64

	mu         sync.Mutex
	journal    []digest.Digest
	generation string
	session    sessionState
	// An older node (docs/design.md §10.7): when it sent the session
	// request whose answer came last (asked), and the one before its
	// last sync (vouchFrom), for its store's view of being synced.
	older            bool
	asked, vouchFrom time.Time
}

// lockclientMaxConns is lockclient's maxConnsPerHost (lockclient/options.go):
// the most connections a node's short requests open at once.
const lockclientMaxConns = 512

// newNode builds node i of n's clients against the coordinator at
// serverURL, with lockclient's pool of connections for its short requests
// (or cfg.ShortConns keep-alive connections), and its event stream opened with its session if
// cfg.SessionStream. The last cfg.olderNodes of the n nodes are older
// nodes (internal/testutil/oldnode: the older wire shape, a stream per
// wait); the first one, which claims the shared root, is current unless
// all are older.
func newNode(i, n int, cfg Config, serverURL string, a *answers) (*node, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, err
	}
	d := newDialer(nodeAddr(i), &a.bytesRead)
	// As lockclient's own (lockclient/http.go), with its pool of
	// connections (maxConnsPerHost) unless cfg.ShortConns bounds them. A
	// request that waits for a connection longer than its deadline counts
	// as a time-out.
	hostClient := func(conns int) *fasthttp.HostClient {
		return &fasthttp.HostClient{
			Addr:                      u.Host,
			Name:                      "sharedcontent-lockclient",
			Dial:                      d.Dial,
			MaxConns:                  conns,
			MaxConnWaitTimeout:        time.Hour,
			MaxIdleConnDuration:       90 * time.Second,
			MaxResponseBodySize:       16 << 20,
			MaxIdemponentCallAttempts: 2,
			RetryIfErr: func(_ *fasthttp.Request, _ int, err error) (resetTimeout, retry bool) {
				return false, errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed) ||
					errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
			},
			DisablePathNormalizing: true,
		}
	}
	var short *shortClient
	if cfg.ShortConns == 0 {
		// The node's pool, as lockclient's: every request takes an idle
		// connection or opens one.
		pool := hostClient(cmp.Or(cfg.poolConns, lockclientMaxConns))
		short = &shortClient{a: a, hc: pool, held: pool}
	} else {
		// A holder's unlock and keepalives take a connection of their own
		// (dialed when first needed: only holders send them), as
		// lockclient's pool would open one rather than queue them behind
		// the node's lock requests and adds.
		short = &shortClient{a: a, hc: hostClient(cfg.ShortConns), held: hostClient(1)}
		if cfg.SessionConn {
			// As the pool would open another connection rather than
			// queue a session call behind the node's lock requests and adds.
			short.sessions = hostClient(1)
		}
	}
	stream := &streamTransport{a: a, rt: &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConns:        128,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     90 * time.Second,
		Proxy:               nil,
	}}
	long := &http.Client{Transport: stream}
	id := fmt.Sprintf("scale-%05d", i)
	opts := []lockclient.Option{lockclient.WithNodeID(id), lockclient.WithShortClient(short), lockclient.WithLongClient(long)}
	older := i >= n-cfg.olderNodes
	switch {
	case older:
		opts = append(opts, lockclient.WithPerRequestStreams())
	case cfg.SessionStream:
		opts = append(opts, lockclient.WithSessionStream())
	}
	c, err := lockclient.New(serverURL, opts...)
	if err != nil {
		return nil, err
	}
	coord := remote.New(c)
	if older {
		coord = oldnode.New(c) // docs/design.md §10.7
	}
	return &node{id: id, client: c, short: short, stream: stream, coord: coord, instance: randomHex(8), generation: randomHex(8), older: older}, nil
}

// newNodes builds n nodes.
func newNodes(n int, cfg Config, serverURL string, a *answers) ([]*node, error) {
	nodes := make([]*node, n)
	for i := range nodes {
		var err error
		if nodes[i], err = newNode(i, n, cfg, serverURL, a); err != nil {
			closeNodes(nodes[:i])
			return nil, err
		}
	}
	return nodes, nil
}

func closeNodes(nodes []*node) {
	for _, n := range nodes {
		n.client.Close()
	}
}

func (n *node) snapshot() ([]digest.Digest, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]digest.Digest(nil), n.journal...), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ensure the loopback address is usable before building thousands of nodes.
func checkLoopback(n int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(nodeAddr(n-1).String(), "0"))
	if err != nil {
		return fmt.Errorf("loopback address %s for node %d: %w (need Linux, where all of 127/8 is lo)", nodeAddr(n-1), n-1, err)
	}
	return ln.Close()
}

// rolloutBlob returns the rollout's image and the index of its blob
// resourceID (nil: not one of its blobs, or no rollout).
func (n *node) rolloutBlob(resourceID string) (*image, int) {
	img := n.img.Load()
	if img == nil {
		return nil, 0
	}
	j, ok := img.index[resourceID]
	if !ok {
		return nil, 0
	}
	return img, j
}
