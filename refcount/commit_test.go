package refcount

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func openTestDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "commit.db"), 0o600, nil)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket(refcountsBucket)
		return err
	}))
	return db
}

// commitBehind commits muts concurrently while an earlier commit runs, so
// that they all queue behind it, then lets that commit finish. It returns
// the earlier commit's transaction ID and each mutation's outcome.
func commitBehind(t *testing.T, c *groupCommitter, muts []func(*bolt.Tx) error) (firstTx int, errs []error) {
	t.Helper()
	running, unblock, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- c.commit(func(tx *bolt.Tx) error {
			close(running)
			<-unblock
			firstTx = tx.ID()
			return nil
		})
	}()
	<-running
	var once sync.Once
	release := func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(release) // a failed test must not leave the commit blocked

	errs = make([]error, len(muts))
	var wg sync.WaitGroup
	for i, m := range muts {
		wg.Go(func() { errs[i] = c.commit(m) })
	}
	require.Eventually(t, func() bool { return len(c.pending) == len(muts) }, 10*time.Second, time.Millisecond,
		"every mutation queued behind the running commit")
	release()
	require.NoError(t, <-done)
	wg.Wait()
	return firstTx, errs
}

func put(key string, txID *int) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		*txID = tx.ID()
		return tx.Bucket(refcountsBucket).Put([]byte(key), []byte("v"))
	}
}

func newTestCommitter(t *testing.T) (*bolt.DB, *groupCommitter) {
	db := openTestDB(t)
	c := newGroupCommitter(db)
	t.Cleanup(c.close) // runs after the release of a blocked commit
	return db, c
}

// TestGroupCommitShares: mutations queued behind a running commit are all
// committed in the next transaction, one for the whole group.
func TestGroupCommitShares(t *testing.T) {
	_, c := newTestCommitter(t)
	const n = 8
	txIDs := make([]int, n)
	muts := make([]func(*bolt.Tx) error, n)
	for i := range muts {
		muts[i] = put(fmt.Sprintf("k%d", i), &txIDs[i])
	}
	firstTx, errs := commitBehind(t, c, muts)
	for i := range n {
		require.NoError(t, errs[i])
		require.Greater(t, txIDs[i], firstTx)
		require.Equal(t, txIDs[0], txIDs[i], "one transaction for the whole group")
	}
}

// TestGroupCommitFailsAlone: a failing mutation in a group fails only its
// own caller; the others are on disk.
func TestGroupCommitFailsAlone(t *testing.T) {
	db, c := newTestCommitter(t)
	const n, bad = 10, 3
	txIDs := make([]int, n)
	muts := make([]func(*bolt.Tx) error, n)
	for i := range muts {
		muts[i] = put(fmt.Sprintf("k%d", i), &txIDs[i])
	}
	muts[bad] = func(*bolt.Tx) error { return errors.New("bad mutation") }
	firstTx, errs := commitBehind(t, c, muts)
	for i := range n {
		if i == bad {
			require.EqualError(t, errs[i], "bad mutation")
			continue
		}
		require.NoError(t, errs[i])
		require.Greater(t, txIDs[i], firstTx, "queued behind the first commit")
	}
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		for i := range n {
			v := tx.Bucket(refcountsBucket).Get([]byte(fmt.Sprintf("k%d", i)))
			if i == bad {
				require.Nil(t, v)
			} else {
				require.Equal(t, []byte("v"), v, "k%d on disk", i)
			}
		}
		return nil
	}))
}

func TestGroupCommitClose(t *testing.T) {
	db := openTestDB(t)
	c := newGroupCommitter(db)
	var tx int
	require.NoError(t, c.commit(put("a", &tx)))
	c.close()
	c.close() // idempotent
	err := c.commit(put("b", &tx))
	require.True(t, errdefs.IsUnavailable(err), "commit after close: %v", err)
}
