package contentv2_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// lockFault is a real coordinator as a node sees it whose pull locks
// fail while fault is set, either slow (each waits out its caller's
// deadline, as a lock request queued behind a storm), unreachable (at
// once, as a refused connection) or reset-until-deadline (connections
// reset until the deadline, as a cut network), while its sessions are
// answered.
type lockFault struct {
	contentv2.Coordinator
	fault    atomic.Pointer[string] // "slow", "unreachable", "reset-until-deadline" or nil
	locks    atomic.Int64           // pull locks asked
	sessions atomic.Int64           // sessions answered
}

func (c *lockFault) Lock(ctx context.Context, req api.LockRequest) (contentv2.Lock, error) {
	if req.Type == api.OperationPull {
		c.locks.Add(1)
	}
	switch f := c.fault.Load(); {
	case f == nil || req.Type != api.OperationPull:
	case *f == "slow":
		<-ctx.Done()
		return nil, fmt.Errorf("lock: %w", ctx.Err())
	case *f == "reset-until-deadline":
		// lockclient retrying a reset connection until the deadline
		// ends a pause between its attempts.
		<-ctx.Done()
		return nil, fmt.Errorf("lock: %w (after: %w)", ctx.Err(),
			&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNRESET})
	default:
		return nil, fmt.Errorf("lock: dial tcp: connection refused: %w", api.ErrUnavailable)
	}
	return c.Coordinator.Lock(ctx, req)
}

func (c *lockFault) Session(ctx context.Context, req contentv2.SessionRequest) (contentv2.SessionInfo, error) {
	info, err := c.Coordinator.Session(ctx, req)
	if err == nil {
		c.sessions.Add(1)
	}
	return info, err
}

// TestSlowAnswerIsNotRetriedAtTheNextSession (docs/design.md §10.6): a
// lock request that outlives the coordination timeout marks the
// coordinator down, and a session answer, which a busy coordinator
// serves at once, does not lift the mark: no retry goes back into the
// queue that timed it out at each session round. One call at a time goes
// through as a probe once a coordination timeout has passed since the
// slow answer; slow again, it sets the mark afresh, so the next call is
// answered unavailable without a request. A coordinator that could not be
// reached at all is asked again as soon as a session answer shows it
// back, as before; so is one whose connections were reset until the
// coordination timeout ended the client's retries (it was not slow: no
// request reached it).
func TestSlowAnswerIsNotRetriedAtTheNextSession(t *testing.T) {
	const coordTimeout = 100 * time.Millisecond
	for _, fault := range []string{"slow", "unreachable", "reset-until-deadline"} {
		t.Run(fault, func(t *testing.T) {
			cfg := lockserver.DefaultConfig()
			cfg.SessionTTL = 600 * time.Millisecond // a session round every 200 ms
			ts := lockservertest.Start(t, lockservertest.WithConfig(cfg))
			client, err := lockclient.New(ts.URL(), lockclient.WithNodeID("n1"))
			require.NoError(t, err)
			t.Cleanup(func() { client.Close() })
			coord := &lockFault{Coordinator: remote.New(client)}
			reg := prometheus.NewRegistry()
			cs, err := contentv2.NewStore(t.TempDir(), "n1", coord, contentv2.WithStateDir(t.TempDir()),
				contentv2.WithCoordinationTimeout(coordTimeout), contentv2.WithRefRetryInterval(time.Hour),
				contentv2.WithRegisterer(reg))
			require.NoError(t, err)
			t.Cleanup(func() { cs.Close() })
			awaitSynced(t, reg)

			data := []byte("slow mark " + fault)
			desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(data), Size: int64(len(data))}
			ctx := context.Background()
			coord.fault.Store(&fault)
			writer := func() error {
				_, err := cs.Writer(ctx, content.WithRef("ref-"+fault), content.WithDescriptor(desc))
				return err
			}
			// sent: before the call, so no later than the mark's own
			// clock (each probe's time counts from its call's end);
			// failed: after it, no earlier.
			sent := time.Now()
			err = writer()
			failed := time.Now()
			require.True(t, errdefs.IsUnavailable(err), "a Writer without the pull lock is retried by containerd: %v", err)
			require.Equal(t, int64(1), coord.locks.Load())

			// Sessions go on being answered.
			answered := coord.sessions.Load()
			deadline := time.Now().Add(time.Minute)
			for coord.sessions.Load() < answered+2 {
				require.True(t, time.Now().Before(deadline), "no session answer")
				time.Sleep(10 * time.Millisecond)
			}
			if fault != "slow" {
				require.True(t, errdefs.IsUnavailable(writer()))
				require.Equal(t, int64(2), coord.locks.Load(), "an unreachable coordinator that answers sessions again is asked again")
				return
			}
			// Before the probe's time, only the mark answers.
			if before := time.Now(); before.Sub(sent) < coordTimeout {
				require.True(t, errdefs.IsUnavailable(writer()))
				require.Equal(t, int64(1), coord.locks.Load(), "a slow coordinator's mark outlasts its session answers: no lock request sent")
			}
			for time.Since(failed) <= coordTimeout {
				time.Sleep(10 * time.Millisecond) // the probe's time is a coordination timeout after the slow answer
			}
			sent = time.Now()
			require.True(t, errdefs.IsUnavailable(writer()), "the probe meets the slow coordinator")
			probed := time.Now()
			require.Equal(t, int64(2), coord.locks.Load(), "one probe went through")
			if before := time.Now(); before.Sub(sent) < coordTimeout {
				require.True(t, errdefs.IsUnavailable(writer()))
				require.Equal(t, int64(2), coord.locks.Load(), "a slow probe sets the mark afresh: no request until the next probe's time")
			}

			// The coordinator is fast again: the next probe lifts the mark.
			coord.fault.Store(nil)
			for time.Since(probed) <= coordTimeout {
				time.Sleep(10 * time.Millisecond)
			}
			w, err := cs.Writer(ctx, content.WithRef("ref-"+fault), content.WithDescriptor(desc))
			require.NoError(t, err, "a probe answered lifts the mark")
			require.NoError(t, w.Close())
		})
	}
}
