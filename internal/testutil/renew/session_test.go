package renew

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// recorder is a coordinator's Session that records when it was called.
type recorder struct {
	l     *lockserver.Coordinator
	mu    sync.Mutex
	calls []time.Time
}

func (r *recorder) open(ctx context.Context, req api.SessionRequest) (api.SessionResponse, error) {
	r.mu.Lock()
	r.calls = append(r.calls, time.Now())
	r.mu.Unlock()
	return r.l.Session(ctx, req)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// TestRenewOpensOnce: the first Renew opens the session, after which the
// coordinator records the node's use; one within a third of the TTL calls
// nothing.
func TestRenewOpensOnce(t *testing.T) {
	ctx := context.Background()
	l := lockservertest.NewCoordinator(t, func(c *lockserver.Config) { c.SessionTTL = time.Hour })
	r := &recorder{l: l}
	s := New("node-a", r.open)
	_, err := l.AddRef(ctx, "sha256:a", "node-a")
	require.ErrorIs(t, err, api.ErrNoSession, "no use before the session")
	require.NoError(t, s.Renew(ctx))
	require.Equal(t, 1, r.count())
	_, err = l.AddRef(ctx, "sha256:a", "node-a")
	require.NoError(t, err, "the use, once the session is open")
	require.NoError(t, s.Renew(ctx))
	require.Equal(t, 1, r.count(), "no renewal within a third of an hour")
}

// TestRenewInterval: Renew calls the coordinator again only once a third
// of the TTL it announced has passed since the call before began.
func TestRenewInterval(t *testing.T) {
	ctx := context.Background()
	const ttl = 30 * time.Millisecond
	l := lockservertest.NewCoordinator(t, func(c *lockserver.Config) { c.SessionTTL = ttl })
	r := &recorder{l: l}
	s := New("node-a", r.open)
	var began []time.Time // when the Renew that called the coordinator began
	deadline := time.Now().Add(time.Minute)
	for r.count() < 3 {
		require.True(t, time.Now().Before(deadline), "3 renewals in a minute")
		before, n := time.Now(), r.count()
		require.NoError(t, s.Renew(ctx))
		if r.count() > n {
			began = append(began, before)
		}
		time.Sleep(time.Millisecond) // a caller's pace
	}
	for i := 1; i < len(r.calls); i++ {
		require.GreaterOrEqual(t, r.calls[i].Sub(began[i-1]), ttl/3, "renewal %d", i)
	}
}

// TestRenewError: a refused session is an error naming the node, and the
// next Renew tries again.
func TestRenewError(t *testing.T) {
	ctx := context.Background()
	r := &recorder{l: lockservertest.NewCoordinator(t)}
	s := New("", r.open)
	err := s.Renew(ctx)
	require.ErrorContains(t, err, `session of node ""`)
	require.ErrorContains(t, err, "node_id")
	require.Error(t, s.Renew(ctx))
	require.Equal(t, 2, r.count())
}
