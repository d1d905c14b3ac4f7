package contentv2

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/stretchr/testify/require"
)

// followEnv is two nodes on one root, coordinated by one fakeCluster:
// node-2 holds a blob's pull lock, node-1 follows it.
type followEnv struct {
	c            *fakeCluster
	root         string
	node1, node2 *store
	data         []byte
	desc         ocispec.Descriptor
	holder       content.Writer // node-2's, under the pull lock
	follower     Follower       // node-1's
	status       chan statusResult
}

type statusResult struct {
	st  content.Status
	err error
}

// newFollowEnv opens node-2's writer and node-1's follower of one blob,
// and starts node-1's Status, which waits; it returns once node-1 waits
// in the coordinator's queue.
func newFollowEnv(t *testing.T) *followEnv {
	e := &followEnv{c: newFakeCluster(longTTL), root: t.TempDir(), status: make(chan statusResult, 1)}
	e.node1 = fakeStore(t, e.c, e.root, "node-1")
	e.node2 = fakeStore(t, e.c, e.root, "node-2")
	e.data, e.desc = testBlob("followed ")
	ctx := context.Background()
	var err error
	e.holder, err = e.node2.Writer(ctx, writerOf(e.desc)...)
	require.NoError(t, err)
	w, err := e.node1.Writer(ctx, writerOf(e.desc)...)
	require.NoError(t, err)
	require.Implements(t, (*Follower)(nil), w, "another node holds the blob")
	e.follower = w.(Follower)
	st, err := e.follower.StatusNow()
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, e.desc.Size}, [2]int64{st.Offset, st.Total}, "offset 0 while it waits")
	go func() {
		st, err := e.follower.Status()
		e.status <- statusResult{st, err}
	}()
	e.c.await(t, "node-1 waiting", func([]fakeCall) bool { return e.c.waiting(e.desc.Digest.String()) == 1 })
	select {
	case r := <-e.status:
		t.Fatalf("Status returned while the holder works: %+v", r)
	default:
	}
	return e
}

// lockCalls returns node's lock calls of the blob.
func (e *followEnv) lockCalls(node string) []fakeCall {
	var out []fakeCall
	for _, c := range calls(e.c.recorded(), "Lock") {
		if c.Node == node && c.Resource == e.desc.Digest.String() {
			out = append(out, c)
		}
	}
	return out
}

// TestFollowerReusesTheCommittedBlob: a follower waits while the holder
// downloads, then reuses its blob: Status reports it whole, Commit
// records node-1's reference without a download, and node-1 never held
// the pull lock.
func TestFollowerReusesTheCommittedBlob(t *testing.T) {
	e := newFollowEnv(t)
	ctx := context.Background()
	_, err := e.holder.Write(e.data)
	require.NoError(t, err)
	require.NoError(t, e.holder.Commit(ctx, e.desc.Size, e.desc.Digest))

	r := <-e.status
	require.NoError(t, r.err)
	require.Equal(t, [2]int64{e.desc.Size, e.desc.Size}, [2]int64{r.st.Offset, r.st.Total}, "the whole blob, downloaded elsewhere")
	_, err = e.follower.Write([]byte("x"))
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "nothing to write")
	require.NoError(t, e.follower.Commit(ctx, e.desc.Size, e.desc.Digest))
	require.NoError(t, e.follower.Close())

	require.Equal(t, []string{"node-1", "node-2"}, e.c.nodesOf(e.desc.Digest.String()))
	require.True(t, e.node1.journal.has(e.desc.Digest))
	locks := e.lockCalls("node-1")
	require.Len(t, locks, 2)
	require.ErrorIs(t, locks[0].Err, api.ErrLocked, "Writer: held by node-2")
	require.ErrorIs(t, locks[1].Err, api.ErrSkipped, "the wait: done by node-2")
	got, err := os.ReadFile(e.node1.blobPath(e.desc.Digest))
	require.NoError(t, err)
	require.Equal(t, e.data, got)
}

// TestFollowerTakesOverWhenTheHolderFails: when the holder gives up, the
// lock is handed to the follower, which downloads from offset 0 and
// commits under it.
func TestFollowerTakesOverWhenTheHolderFails(t *testing.T) {
	e := newFollowEnv(t)
	ctx := context.Background()
	_, err := e.holder.Write(e.data[:10])
	require.NoError(t, err)
	require.NoError(t, e.holder.Close(), "node-2 fails before its commit")

	r := <-e.status
	require.NoError(t, r.err)
	require.Zero(t, r.st.Offset, "handed over: an empty ingest")
	_, err = e.follower.Write(e.data)
	require.NoError(t, err)
	require.NoError(t, e.follower.Commit(ctx, e.desc.Size, e.desc.Digest))

	require.Equal(t, []string{"node-1"}, e.c.nodesOf(e.desc.Digest.String()))
	locks := e.lockCalls("node-1")
	require.Len(t, locks, 2)
	require.NoError(t, locks[1].Err, "the wait ends with the lock")
	var unlocks []fakeCall
	for _, c := range calls(e.c.recorded(), "Unlock") {
		if c.Resource == e.desc.Digest.String() {
			unlocks = append(unlocks, c)
		}
	}
	require.Len(t, unlocks, 2)
	require.Equal(t, []string{"node-2", "node-1"}, []string{unlocks[0].Node, unlocks[1].Node})
	require.Equal(t, []bool{false, true}, []bool{unlocks[0].Success, unlocks[1].Success}, "node-2 failed, node-1 succeeded")
	info, err := e.node1.Info(ctx, e.desc.Digest)
	require.NoError(t, err)
	require.Equal(t, e.desc.Size, info.Size)
}

// TestWaitOutcome: each way a follower's wait ends has its outcome label.
func TestWaitOutcome(t *testing.T) {
	handed, uncoordinated := &writer{lock: &fakeLock{}}, &writer{}
	for _, tc := range []struct {
		w      content.Writer
		err    error
		closed bool
		want   string
	}{
		{nil, nil, false, waitShared},
		{handed, nil, false, waitHanded},
		{uncoordinated, nil, false, waitUncoordinated},
		{nil, fmt.Errorf("following: %w", context.DeadlineExceeded), false, waitTimeout},
		{nil, fmt.Errorf("following: %w", context.Canceled), false, waitCanceled},
		{nil, errdefs.ErrAborted, true, waitCanceled},
		{nil, errdefs.ErrPermissionDenied, false, waitFailed},
	} {
		require.Equal(t, tc.want, waitOutcome(tc.w, tc.err, tc.closed), "%+v", tc)
		require.Contains(t, waitOutcomes, tc.want)
	}
}
