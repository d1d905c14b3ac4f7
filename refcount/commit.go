package refcount

import (
	"fmt"
	"sync"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
)

// maxGroupCommit bounds the mutations committed in one transaction (bbolt's
// own default batch size).
const maxGroupCommit = 1000

// errClosed is returned by mutations after Close.
var errClosed = fmt.Errorf("refcount db is closed: %w", errdefs.ErrUnavailable)

// mutation is one change waiting for a commit.
type mutation struct {
	fn   func(*bolt.Tx) error
	done chan error // receives the outcome once the commit is on disk
}

// groupCommitter commits mutations to a bbolt database with group commit:
// a mutation that finds no commit running is committed at once; mutations
// that arrive while one runs wait for the next, which takes all of them in
// one transaction and one fsync. So a lone mutation pays one commit and no
// delay, and concurrent ones share commits. (bbolt's DB.Batch instead waits
// a fixed delay for company before every commit.)
//
// Its goroutine is started by newGroupCommitter and ended by close.
type groupCommitter struct {
	db      *bolt.DB
	pending chan *mutation
	stopped chan struct{} // closed when the commit goroutine has returned

	mu     sync.RWMutex // senders hold it shared; close holds it exclusively
	closed bool         // protected by mu
}

func newGroupCommitter(db *bolt.DB) *groupCommitter {
	c := &groupCommitter{db: db, pending: make(chan *mutation, maxGroupCommit), stopped: make(chan struct{})}
	go c.run()
	return c
}

// commit runs fn in a write transaction and returns once that transaction
// is on disk. fn may run more than once (alone, after a failed group) and
// must not have other side effects.
func (c *groupCommitter) commit(fn func(*bolt.Tx) error) error {
	done, err := c.submit(fn)
	if err != nil {
		return err
	}
	return <-done
}

// submit queues fn, after every mutation queued before, and returns the
// channel that receives its outcome once its transaction is on disk.
func (c *groupCommitter) submit(fn func(*bolt.Tx) error) (<-chan error, error) {
	m := &mutation{fn: fn, done: make(chan error, 1)}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, errClosed
	}
	c.pending <- m
	return m.done, nil
}

// close commits what is pending, stops the goroutine and waits for it.
// Later commits fail.
func (c *groupCommitter) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.pending)
	c.mu.Unlock()
	<-c.stopped
}

func (c *groupCommitter) run() {
	defer close(c.stopped)
	group := make([]*mutation, 0, maxGroupCommit)
	for m := range c.pending {
		group = append(group[:0], m)
	more:
		for len(group) < maxGroupCommit {
			select {
			case m, ok := <-c.pending:
				if !ok {
					break more
				}
				group = append(group, m)
			default:
				break more
			}
		}
		c.write(group)
		clear(group)
	}
}

// write commits group in one transaction. If that fails, each mutation is
// committed alone, so that one bad mutation fails only its own caller.
func (c *groupCommitter) write(group []*mutation) {
	err := c.db.Update(func(tx *bolt.Tx) error {
		for _, m := range group {
			if err := m.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(group) == 1 {
		for _, m := range group {
			m.done <- err
		}
		return
	}
	for _, m := range group {
		m.done <- c.db.Update(m.fn)
	}
}
