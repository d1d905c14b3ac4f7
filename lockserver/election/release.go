package election

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/containerd/log"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// release ends a term's etcd session: its keepalive stops at once, and
// its lease is revoked (its election key goes with it) as soon as etcd
// answers, retried in the background until etcd says the lease is gone
// or ctx ends (docs/design.md §7.2). Waiting for the lease to expire
// instead is longer than its TTL: an etcd that elected a new leader
// meanwhile extends every lease (by its election timeout), and a key left
// behind keeps every later campaign waiting. Calling it again does
// nothing.
type release struct {
	once sync.Once
	done chan struct{} // closed once the lease is gone or ctx ended
}

func newRelease() *release { return &release{done: make(chan struct{})} }

// Do orphans sess and revokes its lease through cli, each try bounded
// by ttl, a pause of ttl/10 between tries.
func (rl *release) Do(ctx context.Context, cli *clientv3.Client, sess *concurrency.Session, ttl time.Duration) {
	rl.once.Do(func() {
		sess.Orphan()
		go func() {
			defer close(rl.done)
			for tries := 1; ; tries++ {
				rctx, cancel := context.WithTimeout(ctx, ttl)
				_, err := cli.Revoke(rctx, sess.Lease())
				cancel()
				if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
					return
				}
				if ctx.Err() != nil {
					return
				}
				log.G(ctx).WithError(err).WithField("tries", tries).Debug("election: revoke the etcd session's lease: retrying")
				pause := time.NewTimer(ttl / 10)
				select {
				case <-ctx.Done():
					pause.Stop()
					return
				case <-pause.C:
				}
			}
		}()
	})
}
