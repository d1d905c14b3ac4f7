package etcdstore_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
	"github.com/sharedcontent/sharedcontent/refcount/storagetest"
)

// sessionTTL is the leader sessions' TTL in seconds: long enough that a
// loaded machine does not lose one in a test.
const sessionTTL = 30

// leaders knows, for each handle a test opened, the election it won, so
// that a take-over can end it. Keyed by the handle.
type leaders struct {
	cli  *clientv3.Client
	seq  atomic.Int64
	mu   sync.Mutex
	wins map[refcount.Storage]*win
}

// win is an election won: a session and the election it campaigned in,
// under the state's prefix.
type win struct {
	prefix string
	sess   *concurrency.Session
	elect  *concurrency.Election
}

func newLeaders(cli *clientv3.Client) *leaders {
	return &leaders{cli: cli, wins: map[refcount.Storage]*win{}}
}

// campaign wins the election of the state under prefix with a new
// session and opens a handle as its leader, closed (and its session
// revoked) when t ends.
func (l *leaders) campaign(t testing.TB, prefix string, opts etcdstore.Options) *etcdstore.Store {
	t.Helper()
	ctx := t.Context()
	sess, err := concurrency.NewSession(l.cli, concurrency.WithTTL(sessionTTL))
	require.NoError(t, err)
	t.Cleanup(func() { sess.Close() })
	e := concurrency.NewElection(sess, prefix+"leader/")
	require.NoError(t, e.Campaign(ctx, fmt.Sprintf("replica-%d", l.seq.Add(1))))
	s, err := etcdstore.OpenElection(ctx, l.cli, prefix, e, opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	l.mu.Lock()
	l.wins[s] = &win{prefix: prefix, sess: sess, elect: e}
	l.mu.Unlock()
	return s
}

// newStorage is storagetest.Run's newStorage: a new prefix, a new leader.
func (l *leaders) newStorage(t *testing.T) refcount.Storage {
	return l.campaign(t, fmt.Sprintf("/test/%s/%d/", t.Name(), l.seq.Add(1)), etcdstore.Options{})
}

// takeOver is storagetest.Run's takeOver: the leader of s resigns and a
// new session wins the election, as a standby does when the leader steps
// down; its key's create revision is newer.
func (l *leaders) takeOver(t *testing.T, s refcount.Storage) refcount.Storage {
	l.mu.Lock()
	w := l.wins[s]
	l.mu.Unlock()
	require.NoError(t, w.elect.Resign(t.Context()))
	return l.campaign(t, w.prefix, etcdstore.Options{})
}

// TestStorage runs the conformance suite against a real 3-member cluster.
func TestStorage(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	l := newLeaders(c.Client(t))
	storagetest.Run(t, l.newStorage, l.takeOver)
}
