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

// block starts a commit that runs until the returned release is called,
// and returns once it is running, so that the next mutations queue behind
// it. wait returns the blocked commit's outcome.
func block(t *testing.T, c *groupCommitter, txID *int) (release func(), wait func() error) {
	t.Helper()
	running, unblock, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- c.commit(func(tx *bolt.Tx) error {
			close(running)
			<-unblock
			*txID = tx.ID()
			return nil
		})
	}()
	<-running
	var once sync.Once
	release = func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(release) // a failed test must not leave the commit blocked
	return release, func() error { return <-done }
}

func put(key string, txID *int) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		*txID = tx.ID()
		return tx.Bucket(refcountsBucket).Put([]byte(key), []byte("v"))
	}
}

// TestGroupCommit: mutations that arrive while a commit runs share the
// next transaction; a failing one fails alone; all are on disk after.
func TestGroupCommit(t *testing.T) {
	db := openTestDB(t)
	c := newGroupCommitter(db)
	t.Cleanup(c.close) // after the release of a blocked commit

	// The first commit blocks until the others are queued behind it.
	var firstTx int
	release, first := block(t, c, &firstTx)
	const n = 10
	txIDs := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if i == 3 {
				errs[i] = c.commit(func(*bolt.Tx) error { return errors.New("bad mutation") })
				return
			}
			errs[i] = c.commit(put(fmt.Sprintf("k%d", i), &txIDs[i]))
		})
	}
	require.Eventually(t, func() bool { return len(c.pending) == n }, 10*time.Second, time.Millisecond,
		"every mutation queued behind the running commit")
	release()
	require.NoError(t, first())
	wg.Wait()

	for i := range n {
		if i == 3 {
			require.EqualError(t, errs[i], "bad mutation", "the bad mutation fails alone")
			continue
		}
		require.NoError(t, errs[i])
		require.Greater(t, txIDs[i], firstTx, "queued behind the first commit")
	}
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		for i := range n {
			v := tx.Bucket(refcountsBucket).Get([]byte(fmt.Sprintf("k%d", i)))
			if i == 3 {
				require.Nil(t, v)
			} else {
				require.Equal(t, []byte("v"), v, "k%d on disk", i)
			}
		}
		return nil
	}))
}

// TestGroupCommitShares: with no failure, mutations queued behind a
// running commit are all committed in one transaction.
func TestGroupCommitShares(t *testing.T) {
	db := openTestDB(t)
	c := newGroupCommitter(db)
	t.Cleanup(c.close) // after the release of a blocked commit
	var firstTx int
	release, first := block(t, c, &firstTx)
	const n = 8
	txIDs := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { require.NoError(t, c.commit(put(fmt.Sprintf("k%d", i), &txIDs[i]))) })
	}
	require.Eventually(t, func() bool { return len(c.pending) == n }, 10*time.Second, time.Millisecond)
	release()
	require.NoError(t, first())
	wg.Wait()
	for i := range n {
		require.Greater(t, txIDs[i], firstTx)
		require.Equal(t, txIDs[0], txIDs[i], "one transaction for the whole group")
	}
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
