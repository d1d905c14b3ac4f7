package remote_test

import (
	"bytes"
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// countedAdds is a node's coordinator that counts the references the
// node's store adds itself (POST /refs/add).
type countedAdds struct {
	contentv2.Coordinator
	adds atomic.Int64
}

func (c *countedAdds) AddRef(ctx context.Context, dgst digest.Digest, found bool) error {
	c.adds.Add(1)
	return c.Coordinator.AddRef(ctx, dgst, found)
}

// skipRefNode is a node's store (ContainerdMode) on root, through the
// real coordinator, with the skip-adds-ref lever set to on, its counters
// in reg.
type skipRefNode struct {
	id    string
	coord *countedAdds
	store contentv2.Store
	reg   *prometheus.Registry
}

func newSkipRefNode(t *testing.T, ts *lockservertest.Server, root, id string, on bool) *skipRefNode {
	t.Helper()
	n := &skipRefNode{id: id, coord: &countedAdds{Coordinator: node(t, ts, id)}, reg: prometheus.NewRegistry()}
	s, err := contentv2.NewStore(root, id, n.coord, contentv2.WithStateDir(t.TempDir()), contentv2.WithSessionTTL(sessionTTL),
		contentv2.WithRegisterer(n.reg), contentv2.WithSkipAddsRef(on))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	n.store = s
	return n
}

// metric is the store's counter or gauge name (no labels).
func (n *skipRefNode) metric(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// eventually waits, polling, until cond holds (bounded generously: a
// condition, not a time, is what the test asserts).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "waiting for %s", what)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFollowerSkipAddsRef (docs/design.md §10.6, lever c): two nodes wait
// for a third's download of a blob; the one whose store asks for its
// reference with the skip (WithSkipAddsRef(true)) is referenced by the holder's
// unlock and sends no /refs/add; the one with the lever off adds its reference itself, as
// before. Both read the blob, and the coordinator references all three.
func TestFollowerSkipAddsRef(t *testing.T) {
	ctx := context.Background()
	ts := start(t)
	root := filepath.Join(t.TempDir(), "root")
	holder := newSkipRefNode(t, ts, root, "holder", true)
	asks := newSkipRefNode(t, ts, root, "asks", true)
	adds := newSkipRefNode(t, ts, root, "adds", false)
	nodes := []*skipRefNode{holder, asks, adds}
	for _, n := range nodes {
		eventually(t, n.id+" synced", func() bool { return n.metric(t, "sharedcontent_store_synced") == 1 })
	}

	data := bytes.Repeat([]byte("skip adds ref;"), 1000)
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(data), Size: int64(len(data))}
	ref := "layer-" + desc.Digest.String()
	hw, err := holder.store.Writer(ctx, content.WithRef(ref), content.WithDescriptor(desc))
	require.NoError(t, err)
	defer hw.Close()

	// The followers wait in Status, as containerd's fetch does.
	type outcome struct {
		st  content.Status
		err error
	}
	waits := map[string]chan outcome{}
	writers := map[string]content.Writer{}
	for _, n := range []*skipRefNode{asks, adds} {
		w, err := n.store.Writer(ctx, content.WithRef(ref), content.WithDescriptor(desc))
		require.NoError(t, err)
		defer w.Close()
		_, ok := w.(contentv2.Follower)
		require.True(t, ok, "%s follows the holder", n.id)
		writers[n.id], waits[n.id] = w, make(chan outcome, 1)
		go func() {
			st, err := w.Status()
			waits[n.id] <- outcome{st, err}
		}()
	}
	observer := node(t, ts, "observer")
	eventually(t, "both followers queued", func() bool {
		st, err := ts.Core().Status(ctx, api.OperationPull, desc.Digest.String(), "", "")
		return err == nil && st.QueueLength == 2
	})

	_, err = hw.Write(data)
	require.NoError(t, err)
	require.NoError(t, hw.Commit(ctx, desc.Size, desc.Digest))
	for _, n := range []*skipRefNode{asks, adds} {
		o := <-waits[n.id]
		require.NoError(t, o.err, n.id)
		require.Equal(t, desc.Size, o.st.Offset, "%s: the holder's blob, not a download", n.id)
		require.NoError(t, writers[n.id].Commit(ctx, desc.Size, desc.Digest), n.id)
		ra, err := n.store.ReaderAt(ctx, desc)
		require.NoError(t, err, "%s reads the blob", n.id)
		require.NoError(t, ra.Close())
	}

	require.Equal(t, 1.0, asks.metric(t, "sharedcontent_store_skip_refs_total"))
	require.Zero(t, asks.coord.adds.Load(), "the asking follower sent no /refs/add")
	require.Zero(t, adds.metric(t, "sharedcontent_store_skip_refs_total"))
	require.Equal(t, int64(1), adds.coord.adds.Load(), "the follower without the lever adds its reference itself")
	var users []string
	require.NoError(t, observer.Refs(ctx, func(resource string, nodes []string) error {
		if resource == desc.Digest.String() {
			users = nodes
		}
		return nil
	}))
	require.ElementsMatch(t, []string{"holder", "asks", "adds"}, users)
}
