package remote_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// countingClient counts the sync requests a node sends, and their bytes.
type countingClient struct {
	c              fasthttp.Client
	syncs, bytes   atomic.Int64
	status429      atomic.Int64
	lastRetryAfter atomic.Value
}

func (c *countingClient) DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	sync := strings.HasSuffix(string(req.URI().Path()), "/refs") && string(req.Header.Method()) == http.MethodPut
	if sync {
		c.syncs.Add(1)
		c.bytes.Add(int64(len(req.Body())))
	}
	err := c.c.DoDeadline(req, resp, deadline)
	if err == nil && sync && resp.StatusCode() == http.StatusTooManyRequests {
		c.status429.Add(1)
		c.lastRetryAfter.Store(string(resp.Header.Peek("Retry-After")))
	}
	return err
}

// countingNode returns node id's coordinator, counting its sync requests.
func countingNode(t *testing.T, coord *lockservertest.Server, id string) (contentv2.Coordinator, *countingClient) {
	t.Helper()
	cc := &countingClient{}
	c, err := lockclient.New(coord.URL(), lockclient.WithNodeID(id), lockclient.WithShortClient(cc))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return remote.New(c), cc
}

// metric returns the value of one series on the coordinator's /metrics.
func metric(t *testing.T, coord *lockservertest.Server, series string) float64 {
	t.Helper()
	resp, err := http.Get(coord.URL() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}

// syncJournal opens a session and syncs journal in it.
func syncJournal(t *testing.T, c contentv2.Coordinator, gen string, journal []digest.Digest) {
	t.Helper()
	ctx := context.Background()
	info, err := c.Session(ctx, contentv2.SessionRequest{InstanceID: "i-" + gen})
	require.NoError(t, err)
	require.False(t, info.Synced)
	require.NoError(t, c.SyncRefs(ctx, contentv2.SyncRequest{Generation: gen,
		Snapshot: func() ([]digest.Digest, error) { return journal, nil },
		Echo:     func() *contentv2.Echo { return &contentv2.Echo{Epoch: info.Epoch, Stamp: info.Stamp} }}))
}

// TestSyncByHashAcrossRestart: over loopback HTTP, a node whose journal
// has not changed re-syncs after a coordinator restart with two small
// requests (the announcement and the hash) and nothing written; a node
// whose journal changed sends only the resource IDs of the differing
// buckets, and the coordinator's record is its journal again.
func TestSyncByHashAcrossRestart(t *testing.T) {
	ctx := context.Background()
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = sessionTTL
	coord := lockservertest.Start(t, lockservertest.WithConfig(cfg))
	journal := make([]digest.Digest, 2000)
	for i := range journal {
		journal[i] = blobDigest(i)
	}
	c, counted := countingNode(t, coord, "node-1")
	syncJournal(t, c, "gen-1", journal)
	require.EqualValues(t, 2, counted.syncs.Load(), "the first sync is full: the announcement and one chunk")
	full := counted.bytes.Load()

	coord.Restart()
	counted.syncs.Store(0)
	counted.bytes.Store(0)
	syncJournal(t, c, "gen-1", journal)
	require.EqualValues(t, 2, counted.syncs.Load(), "unchanged: the announcement and the hash")
	require.Less(t, counted.bytes.Load(), int64(1024), "under 1 KB sent")
	require.EqualValues(t, 1, metric(t, coord, `sharedcontent_syncs_total{mode="hash"}`))
	t.Logf("re-sync of %d references: full %d bytes, by hash %d bytes", len(journal), full, counted.bytes.Load())

	// Changed: one reference dropped, one added.
	dropped, added := journal[7], blobDigest(len(journal))
	journal = append(append(journal[:7:7], journal[8:]...), added)
	coord.Restart()
	counted.syncs.Store(0)
	counted.bytes.Store(0)
	syncJournal(t, c, "gen-1", journal)
	require.EqualValues(t, 4, counted.syncs.Load(), "announcement, hash, bucket hashes, the differing buckets")
	require.Less(t, counted.bytes.Load(), full/10)
	require.EqualValues(t, 1, metric(t, coord, `sharedcontent_syncs_total{mode="buckets"}`))
	for d, want := range map[digest.Digest][]string{dropped: nil, added: {"node-1"}, journal[100]: {"node-1"}} {
		refs, err := coord.Core().Refs(ctx, d.String())
		require.NoError(t, err)
		if want == nil {
			require.Empty(t, refs.Nodes, "%s", d)
		} else {
			require.Equal(t, want, refs.Nodes, "%s", d)
		}
	}
	// And the next restart finds it unchanged again.
	coord.Restart()
	counted.syncs.Store(0)
	syncJournal(t, c, "gen-1", journal)
	require.EqualValues(t, 2, counted.syncs.Load())
}

// TestSyncBusyRetryAfter: a chunk past the coordinator's cluster-wide sync
// buffer is answered 429 with Retry-After; the node waits and sends the
// same chunk again, and its sync finishes once room is made, where it was.
func TestSyncBusyRetryAfter(t *testing.T) {
	ctx := context.Background()
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = sessionTTL
	cfg.MaxSyncBuffer = api.MaxSyncChunk
	coord := lockservertest.Start(t, lockservertest.WithConfig(cfg))

	// A hog fills the buffer with an unfinished sync.
	hog, err := lockclient.New(coord.URL(), lockclient.WithNodeID("hog"))
	require.NoError(t, err)
	defer hog.Close()
	_, err = hog.Session(ctx, api.SessionRequest{NodeID: "hog", InstanceID: "hog-1"})
	require.NoError(t, err)
	fill := make([]string, api.MaxSyncChunk)
	for i := range fill {
		fill[i] = fmt.Sprintf("sha256:hog%d", i)
	}
	zero := 0
	_, err = hog.SyncRefs(ctx, api.SyncRequest{SyncID: "hog", ResourceIDs: []string{}, Offset: &zero})
	require.NoError(t, err)
	_, err = hog.SyncRefs(ctx, api.SyncRequest{SyncID: "hog", ResourceIDs: fill, Offset: &zero})
	require.NoError(t, err)

	c, counted := countingNode(t, coord, "node-1")
	done := make(chan error, 1)
	go func() {
		info, err := c.Session(ctx, contentv2.SessionRequest{InstanceID: "i"})
		if err != nil {
			done <- err
			return
		}
		done <- c.SyncRefs(ctx, contentv2.SyncRequest{Generation: "gen-1",
			Snapshot: func() ([]digest.Digest, error) { return []digest.Digest{blobDigest(1), blobDigest(2)}, nil },
			Echo:     func() *contentv2.Echo { return &contentv2.Echo{Epoch: info.Epoch, Stamp: info.Stamp} }})
	}()
	require.Eventually(t, func() bool { return counted.status429.Load() > 0 }, time.Minute, 10*time.Millisecond)
	require.Equal(t, "1", counted.lastRetryAfter.Load())
	require.EqualValues(t, 1, metric(t, coord, `sharedcontent_sync_refusals_total{reason="buffer"}`))
	// The hog's session ends, and its unfinished sync with it: room is made.
	ended, err := hog.EndSession(ctx, "hog-1")
	require.NoError(t, err)
	require.True(t, ended.Ended)
	require.NoError(t, <-done)
	refs, err := coord.Core().Refs(ctx, blobDigest(2).String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-1"}, refs.Nodes)
}
