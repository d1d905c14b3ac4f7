package lockserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// heldSubmits is a memory storage whose submitted reference writes are
// held at a gate, as a bbolt commit waits for its fsync: ordered, not yet
// visible.
type heldSubmits struct {
	refcount.LocalStorage
	submitted chan struct{}
	open      chan struct{}
}

func (s *heldSubmits) Submit(ctx context.Context, b *refcount.Batch) func() error {
	s.submitted <- struct{}{}
	return func() error {
		<-s.open
		return s.Commit(ctx, b)
	}
}

// addHeld starts node n1's reference to blob on a coordinator whose
// storage holds the write at its gate (store.open), and returns once the
// write is ordered; added receives the add's error (or a wrong count).
func addHeld(t *testing.T) (c *Coordinator, store *heldSubmits, added <-chan error) {
	store = &heldSubmits{LocalStorage: refcount.NewMemoryStorage(), submitted: make(chan struct{}), open: make(chan struct{})}
	c, err := NewCoordinator(DefaultConfig(), Options{Refs: refcount.NewManager(store)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	syncedNode(t, c, "n1")
	done := make(chan error, 1)
	go func() {
		resp, err := c.AddRef(context.Background(), blob, "n1")
		if err == nil && resp.Count != 1 {
			err = fmt.Errorf("count %d, want 1", resp.Count)
		}
		done <- err
	}()
	<-store.submitted
	return c, store, done
}

// TestDeleteRefusedWhileAddPending: a reference whose write is ordered
// but not yet durable counts for the delete rule (docs/design.md §8.7): a
// delete that checks meanwhile is refused with the adding node named, and
// the add completes once its write does.
func TestDeleteRefusedWhileAddPending(t *testing.T) {
	ctx := context.Background()
	c, store, added := addHeld(t)
	// The add waits for its write without the shard mutex: a delete gets
	// an answer, and it is no.
	_, err := c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "n2"})
	var inUse *api.InUseError
	require.ErrorAs(t, err, &inUse)
	require.Equal(t, []string{"n1"}, inUse.Refs.Nodes)
	close(store.open)
	require.NoError(t, <-added)
	require.Equal(t, []string{"n1"}, refsOf(t, c, blob))
	st := c.references.stripe(blob)
	st.mu.Lock()
	defer st.mu.Unlock()
	require.Empty(t, st.adding, "nothing is pending once the add returned")
}

// TestAddEndsWithoutShardMutex: an add whose write has become durable
// returns without taking the shard mutex again, so the adds one commit
// ends do not queue for it in front of the shard's locks and unlocks
// (docs/design.md §10.2). Here the shard mutex is held while the write
// lands: the add returns all the same (else the test hangs).
func TestAddEndsWithoutShardMutex(t *testing.T) {
	ctx := context.Background()
	c, store, added := addHeld(t)
	sh := c.locks.shardFor(blob)
	sh.mu.Lock()
	rc, err := c.references.refsWithPending(ctx, blob)
	require.NoError(t, err)
	require.Equal(t, []string{"n1"}, rc.NodeList(), "pending, counted")
	close(store.open)
	require.NoError(t, <-added)
	rc, err = c.references.refsWithPending(ctx, blob)
	sh.mu.Unlock()
	require.NoError(t, err)
	require.Equal(t, []string{"n1"}, rc.NodeList(), "durable, counted once")
}

// TestAddRefRacesDelete: on bbolt, where an add waits for its commit
// without the shard mutex, a node's reference and another node's delete
// of the same blob never both succeed.
func TestAddRefRacesDelete(t *testing.T) {
	ctx := context.Background()
	s, err := refcount.OpenBoltStorage(filepath.Join(t.TempDir(), "refs.db"))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	c, err := NewCoordinator(DefaultConfig(), Options{Refs: refcount.NewManager(s)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	members(t, c, "adder")
	const rounds = 200
	for i := range rounds {
		id := fmt.Sprintf("sha256:race-%d", i)
		var (
			wg             sync.WaitGroup
			start          = make(chan struct{})
			resp           api.LockResponse
			addErr, delErr error
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, addErr = c.AddRef(ctx, id, "adder")
		}()
		go func() {
			defer wg.Done()
			<-start
			resp, delErr = c.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: id, NodeID: "deleter"})
		}()
		close(start)
		wg.Wait()
		if resp.Acquired {
			require.ErrorIs(t, addErr, api.ErrDeleting, "round %d: delete granted and the reference added", i)
			continue
		}
		require.NoError(t, addErr, "round %d", i)
		require.True(t, errors.Is(delErr, api.ErrInUse), "round %d: %v", i, delErr)
	}
}
