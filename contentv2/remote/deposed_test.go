package remote_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// deposingLocks deposes the leader right before a delete's unlock is
// sent: the deleter has renamed the blob into the trash, and another
// replica wins the election meanwhile.
type deposingLocks struct {
	contentv2.Coordinator
	depose func()
}

func (c deposingLocks) Lock(ctx context.Context, req api.LockRequest) (contentv2.Lock, error) {
	lk, err := c.Coordinator.Lock(ctx, req)
	if err != nil || req.Type != api.OperationDelete {
		return lk, err
	}
	return deposingLock{Lock: lk, depose: c.depose}, nil
}

type deposingLock struct {
	contentv2.Lock
	depose func()
}

func (l deposingLock) Unlock(ctx context.Context, success bool, cause error) error {
	l.depose()
	return l.Lock.Unlock(ctx, success, cause)
}

// TestDeposedLeaderCompletesNoDelete (docs/design.md §8.11): a leader on
// a real 3-member etcd cluster grants a delete (its marker is written),
// the deleter renames the blob into the trash, and another replica wins
// the election before the unlock arrives. The deposed leader's guarded
// commit of the delete's success fails, so the deleter puts the blob
// back: it is readable, the trash is empty, and etcd still holds the
// marker (the new leader counts it as lapsed) and no completion.
func TestDeposedLeaderCompletesNoDelete(t *testing.T) {
	ctx := context.Background()
	ec := etcdtest.Start(t, etcdtest.Options{})
	cli := ec.Client(t)
	const prefix = "/deposed/"
	campaign := func(name string) *concurrency.Election {
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
		require.NoError(t, err)
		t.Cleanup(func() { sess.Close() })
		e := concurrency.NewElection(sess, prefix+"leader/")
		require.NoError(t, e.Campaign(ctx, name))
		return e
	}
	leader := campaign("replica-1")
	store, err := etcdstore.OpenElection(ctx, cli, prefix, leader, etcdstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	cfg := lockserver.DefaultConfig()
	cfg.SessionTTL = sessionTTL
	coord, err := lockserver.NewCoordinator(cfg, lockserver.Options{Refs: refcount.NewManager(store)})
	require.NoError(t, err)
	t.Cleanup(func() { coord.Close() })
	lc, err := lockclient.NewEmbedded(coord, lockclient.WithNodeID("node-1"), lockclient.WithMaxRetries(1),
		lockclient.WithRetryInterval(10*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { lc.Close() })

	deposed := false
	depose := func() {
		require.NoError(t, leader.Resign(ctx))
		campaign("replica-2")
		deposed = true
	}
	root := t.TempDir()
	s := trashStore(t, root, deposingLocks{Coordinator: remote.New(lc), depose: depose})
	d := digest.FromString("survives")
	putFile(t, blobFile(root, d), "survives", 0)

	require.NoError(t, s.Delete(ctx, d))
	require.True(t, deposed, "the delete was granted and its unlock sent")
	b, err := os.ReadFile(blobFile(root, d))
	require.NoError(t, err, "the blob is back in place")
	require.Equal(t, "survives", string(b))
	es, _ := os.ReadDir(filepath.Join(root, contentv2.TrashDir))
	require.Empty(t, es)

	// etcd holds the marker of the granted delete, no completion.
	dels, err := store.Deletes(ctx)
	require.NoError(t, err)
	require.Contains(t, dels.InFlight, d.String(), "the grant wrote its marker")
	require.NotContains(t, dels.Completed, d.String(), "the deposed leader recorded no completion")
}
