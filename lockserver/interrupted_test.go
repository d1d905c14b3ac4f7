package lockserver

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// Adopt and forget are each one transaction (docs/design.md §8.10): interrupted at any
// point, they leave the old state or the new one, and running the same
// command again completes them. These tests interrupt them on a real
// bbolt database by failing the write a crash would have cut short, then
// "restart" the coordinator on the same file.

// interruptedDB is a bbolt storage whose next commit that matches cut
// fails, as if the process had died at that write.
type interruptedDB struct {
	*refcount.BoltStorage
	cut   func(refcount.Write) bool
	armed atomic.Bool
}

var errKilled = errors.New("killed before this write")

func (d *interruptedDB) Commit(ctx context.Context, b *refcount.Batch) error {
	for _, op := range b.Writes() {
		if d.cut(op) && d.armed.CompareAndSwap(true, false) {
			return errKilled
		}
	}
	return d.BoltStorage.Commit(ctx, b)
}

// startOn starts a Coordinator on the database file at path, cutting the
// commit that matches cut once armed; the Coordinator and the file are closed
// by stop or when t ends.
func startOn(t *testing.T, path string, cut func(refcount.Write) bool, mutate ...func(*Config)) (c *Coordinator, db *interruptedDB, stop func()) {
	t.Helper()
	s, err := refcount.OpenBoltStorage(path)
	require.NoError(t, err)
	db = &interruptedDB{BoltStorage: s, cut: cut}
	cfg := DefaultConfig()
	for _, m := range mutate {
		m(&cfg)
	}
	c, err = NewCoordinator(cfg, Options{Refs: refcount.NewManager(db)})
	require.NoError(t, err)
	var once atomic.Bool
	stop = func() {
		if once.CompareAndSwap(false, true) {
			c.Close()
			s.Close()
		}
	}
	t.Cleanup(stop)
	return c, db, stop
}

// storedCoordinator is a Coordinator on a database file in a directory, as a
// coordinator runs one, that a test can stop and start again on it.
type storedCoordinator struct {
	*Coordinator
	stop func()
}

// startStored starts a Coordinator on the database in dir; it stops when t
// ends, or at Stop.
func startStored(t *testing.T, dir string, mutate ...func(*Config)) *storedCoordinator {
	t.Helper()
	c, _, stop := startOn(t, filepath.Join(dir, "coordinator.db"), never, mutate...)
	return &storedCoordinator{Coordinator: c, stop: stop}
}

// Stop stops the Coordinator and closes its database before the test ends.
func (s *storedCoordinator) Stop() { s.stop() }

func memberIDs(t *testing.T, c *Coordinator) []string {
	t.Helper()
	nodes, err := c.Nodes(context.Background())
	require.NoError(t, err)
	ids := []string{}
	for _, n := range nodes.Nodes {
		ids = append(ids, n.NodeID)
	}
	return ids
}

// TestAdoptInterrupted: an adopt killed before the cluster ID was written
// left, before this transaction, the members written and the old cluster
// ID, so the same command was then refused ("already has 2 members").
// Now nothing is written, and the same command completes it.
func TestAdoptInterrupted(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	coord, db, stop := startOn(t, path, func(op refcount.Write) bool { return op.Kind == refcount.WritePutIdentity })
	old := coord.Cluster()
	req := api.AdoptRequest{ClusterID: "the-roots-cluster", Nodes: []string{"n1", "n2"}}

	db.armed.Store(true)
	_, err := coord.Adopt(ctx, req)
	require.ErrorIs(t, err, errKilled)
	require.Equal(t, old, coord.Cluster(), "the interrupted adopt changed the identity")
	require.Empty(t, memberIDs(t, coord), "the interrupted adopt left members")

	stop() // the coordinator dies; it restarts on the same database
	coord, _, _ = startOn(t, path, func(refcount.Write) bool { return false })
	require.Equal(t, old.ClusterID, coord.Cluster().ClusterID, "all old on disk")
	require.Empty(t, memberIDs(t, coord), "all old on disk")

	c, err := coord.Adopt(ctx, req)
	require.NoError(t, err, "the same command completes the adopt")
	require.Equal(t, "the-roots-cluster", c.ClusterID)
	require.Equal(t, []string{"n1", "n2"}, memberIDs(t, coord))
	again, err := coord.Adopt(ctx, req)
	require.NoError(t, err, "adopting the same cluster again succeeds")
	require.Equal(t, c.ClusterID, again.ClusterID)
	require.Equal(t, c.Epoch+1, again.Epoch)
	require.Equal(t, []string{"n1", "n2"}, memberIDs(t, coord))
}

// TestAdoptRefusalSaysWhatToDo: adopting another cluster into a
// coordinator that has members is refused, and the message names the
// command and its --force, and changes nothing.
func TestAdoptRefusalSaysWhatToDo(t *testing.T) {
	ctx := context.Background()
	coord, _, _ := startOn(t, filepath.Join(t.TempDir(), "db"), func(refcount.Write) bool { return false })
	_, err := coord.Adopt(ctx, api.AdoptRequest{ClusterID: "cluster-a", Nodes: []string{"n1"}})
	require.NoError(t, err)
	before := coord.Cluster()
	_, err = coord.Adopt(ctx, api.AdoptRequest{ClusterID: "cluster-b", Nodes: []string{"n2"}})
	require.ErrorIs(t, err, api.ErrMemberLive)
	require.ErrorContains(t, err, "sharedcontentctl cluster adopt")
	require.ErrorContains(t, err, "--force")
	require.ErrorContains(t, err, "cluster-a")
	require.Equal(t, before, coord.Cluster())
	require.Equal(t, []string{"n1"}, memberIDs(t, coord))

	c, err := coord.Adopt(ctx, api.AdoptRequest{ClusterID: "cluster-b", Nodes: []string{"n2"}, Force: true})
	require.NoError(t, err)
	require.Equal(t, "cluster-b", c.ClusterID)
	require.Equal(t, []string{"n1", "n2"}, memberIDs(t, coord))
}

// TestForgetInterrupted: a forget killed between dropping the node's
// references and its member record left, before this transaction, a
// member with no references: back, it was unsynced until it synced, and
// the blobs it used had no reference. Now the interrupted forget leaves
// both, and the same command completes it.
func TestForgetInterrupted(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "db")
	never := func(refcount.Write) bool { return false }
	c, _, stop := startOn(t, path, never)
	for _, n := range []string{"n1", "n2"} {
		session(t, c, n)
		_, err := c.AddRef(ctx, blob, n)
		require.NoError(t, err)
	}
	stop() // a member is forgettable once its session is gone

	c, db, stop := startOn(t, path, func(op refcount.Write) bool { return op.Kind == refcount.WriteDeleteMember })
	db.armed.Store(true)
	require.ErrorIs(t, c.Forget(ctx, "n1"), errKilled)
	require.Equal(t, []string{"n1", "n2"}, refsOf(t, c, blob), "the interrupted forget dropped references")
	require.Equal(t, []string{"n1", "n2"}, memberIDs(t, c))

	stop()
	c, _, _ = startOn(t, path, never)
	require.Equal(t, []string{"n1", "n2"}, refsOf(t, c, blob), "all old on disk")
	require.Equal(t, []string{"n1", "n2"}, memberIDs(t, c), "all old on disk")

	require.NoError(t, c.Forget(ctx, "n1"), "the same command completes the forget")
	require.Equal(t, []string{"n2"}, refsOf(t, c, blob))
	require.Equal(t, []string{"n2"}, memberIDs(t, c))
	require.ErrorIs(t, c.Forget(ctx, "n1"), api.ErrNotFound, "forgetting it again is harmless: not found, nothing changed")
	require.Equal(t, []string{"n2"}, memberIDs(t, c))
}
