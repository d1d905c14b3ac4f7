package remote_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/internal/testutil/oldnode"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// countingStreams counts the event streams a client opens, by path.
type countingStreams struct {
	rt                http.RoundTripper
	subscribe, events atomic.Int64
}

func (c *countingStreams) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.URL.Path {
	case "/lock/subscribe":
		c.subscribe.Add(1)
	case "/lock/events":
		c.events.Add(1)
	}
	return c.rt.RoundTrip(req)
}

// TestMixedVersions (docs/design.md §10.7): a real coordinator (bbolt,
// HTTP) serves an older node (the wire shape before the session timing
// rule: internal/testutil/oldnode) beside a current one. The older node's
// renewals keep it synced and do not re-send its journal: a renewal
// answered within half a TTL of the session answer that preceded its last
// sync (by the times recorded here, which bound the coordinator's) is
// answered synced and followed by no sync, and at every check within a
// TTL of that answer the node counts as synced; the syncs it is asked for
// (every other renewal) write nothing, its journal unchanged. Deletes stay
// right: every blob of its journal is referenced and refused to the
// current node's delete, and an unused blob's delete is granted whenever
// the older node is within its vouch. The older node waits for a pull on
// a stream of its own (/lock/subscribe) and is told to skip.
//
// Before: every renewal of the older node opened an unsynced session, so
// it sent its whole journal each TTL/3 and deletes waited meanwhile.
func TestMixedVersions(t *testing.T) {
	const ttl = 3 * time.Second
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL, cfg.LeaseTTL = ttl, ttl
	coord := lockservertest.Start(t, lockservertest.WithConfig(cfg))
	ctx := context.Background()

	oldSyncs := &countingClient{}
	oldStreams := &countingStreams{rt: http.DefaultTransport}
	oc, err := lockclient.New(coord.URL(), lockclient.WithNodeID("old"), lockclient.WithShortClient(oldSyncs),
		lockclient.WithLongClient(&http.Client{Transport: oldStreams}), lockclient.WithPerRequestStreams())
	require.NoError(t, err)
	t.Cleanup(func() { oc.Close() })
	old := oldnode.New(oc)
	cur, _ := countingNode(t, coord, "cur")
	ac, err := lockclient.New(coord.URL(), lockclient.WithNodeID("cur"))
	require.NoError(t, err)
	t.Cleanup(func() { ac.Close() })

	journal := make([]digest.Digest, 200)
	for i := range journal {
		journal[i] = digest.FromString(fmt.Sprintf("old-%d", i))
	}
	snapshot := func() ([]digest.Digest, error) { return journal, nil }

	// The current node: a session with an echo, synced by hash.
	var curInfo contentv2.SessionInfo
	var curAt time.Time
	curEcho := func() *contentv2.Echo {
		return &contentv2.Echo{Epoch: curInfo.Epoch, Stamp: curInfo.Stamp, Elapsed: time.Since(curAt)}
	}
	curRenew := func() {
		t.Helper()
		req := contentv2.SessionRequest{InstanceID: "i-cur", Generation: "g-cur"}
		if !curAt.IsZero() {
			req.Echo = curEcho()
		}
		info, err := cur.Session(ctx, req)
		require.NoError(t, err)
		curInfo, curAt = info, time.Now()
		if !info.Synced {
			require.NoError(t, cur.SyncRefs(ctx, contentv2.SyncRequest{Generation: "g-cur", Snapshot: func() ([]digest.Digest, error) { return nil, nil }, Echo: curEcho}))
		}
	}
	curRenew()

	// The older node: it syncs when the answer says so. proven is when it
	// sent the session request whose answer preceded its last sync: the
	// coordinator answered it later, so its vouch lasts at least until
	// proven + TTL.
	var proven time.Time
	renewals, kept, resyncs := 0, 0, 0
	oldRenew := func() {
		t.Helper()
		sent := time.Now()
		info, err := old.Session(ctx, contentv2.SessionRequest{InstanceID: "ignored", Echo: &contentv2.Echo{}})
		require.NoError(t, err)
		answered := time.Since(proven)
		if !proven.IsZero() {
			renewals++
			if answered < ttl/2 {
				require.True(t, info.Synced, "a renewal answered %s after the last proven answer (< TTL/2) keeps the node synced", answered)
				kept++
			}
		}
		if info.Synced {
			return
		}
		require.NoError(t, old.SyncRefs(ctx, contentv2.SyncRequest{Snapshot: snapshot}))
		if !proven.IsZero() {
			resyncs++
		}
		proven = sent
	}
	oldSynced := func() {
		t.Helper()
		nodes, err := ac.Nodes(ctx)
		require.NoError(t, err)
		if age := time.Since(proven); age < ttl {
			for _, n := range nodes.Nodes {
				if n.NodeID == "old" {
					require.True(t, n.Synced, "the older node %s after its last proven answer (< TTL)", age)
				}
			}
		}
	}
	oldRenew()
	require.Equal(t, int64(2), oldSyncs.syncs.Load(), "the first session syncs: announce and done")

	// Renew both as the daemons do, every TTL/3, for two TTLs (longer,
	// up to 20 TTLs, until a renewal could be checked: a loaded machine
	// may answer late), and right after each of the older node's syncs
	// once more.
	start := time.Now()
	for end, last := start.Add(2*ttl), start.Add(20*ttl); time.Now().Before(end) || kept == 0 && time.Now().Before(last); {
		before := resyncs
		oldRenew()
		if resyncs > before {
			oldRenew() // at once: within half the vouch
		}
		curRenew()
		oldSynced()
		time.Sleep(ttl / 3) // the renewal interval, not a wait for anything
	}
	journals := int(oldSyncs.syncs.Load()/2) - 1
	t.Logf("older node: %d renewals, %d of them checked kept (within TTL/2), %d journals re-sent", renewals, kept, journals)
	require.Equal(t, resyncs, journals)
	require.Positive(t, kept, "no renewal came within TTL/2 of its proven answer: the machine is too slow to check the rule")
	require.Less(t, journals, renewals, "the journal is not re-sent at every renewal")
	require.Equal(t, float64(resyncs), metric(t, coord, `sharedcontent_syncs_total{mode="full_equal"}`),
		"every re-sync of the unchanged journal wrote nothing")

	// Every blob of the older node's journal is referenced, and refused to
	// the current node's delete.
	for _, d := range journal {
		refs, err := ac.Refs(ctx, d.String())
		require.NoError(t, err)
		require.Equal(t, []string{"old"}, refs.Nodes, "%s", d)
	}
	_, err = cur.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: journal[0].String()})
	require.ErrorIs(t, err, api.ErrInUse)

	// An unused blob's delete is granted once both are synced; a refusal
	// naming the older node only past its vouch.
	unused := digest.FromString("unused").String()
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 20, "no delete granted")
		oldRenew()
		curRenew()
		lk, err := cur.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: unused})
		if err == nil {
			require.NoError(t, lk.Unlock(ctx, true, nil))
			break
		}
		var ue *api.UnsyncedError
		require.ErrorAs(t, err, &ue)
		if age := time.Since(proven); age < ttl {
			require.NotContains(t, ue.Nodes, "old", "refused for the older node %s after its last proven answer", age)
		}
	}

	// A pull: the current node holds it, the older node waits on a stream
	// of its own and is told to skip once the blob is in.
	blob := digest.FromString("pulled").String()
	held, err := cur.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob})
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := old.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: blob})
		waited <- err
	}()
	require.Eventually(t, func() bool { return oldStreams.subscribe.Load() > 0 }, 10*time.Second, 10*time.Millisecond,
		"the older node waits on /lock/subscribe")
	require.NoError(t, held.Unlock(ctx, true, nil))
	require.ErrorIs(t, <-waited, api.ErrSkipped)
	require.Zero(t, oldStreams.events.Load(), "the older node opened no node stream")
}
