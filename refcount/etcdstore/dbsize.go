package etcdstore

import (
	"context"
	"time"

	"github.com/containerd/log"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// PollDBSize sets the database size gauges from etcd's Status of every
// endpoint of cli, now and then every interval, until ctx ends. The
// figure is the largest over the members that answered: the quota alarm
// fires on the first member to reach --quota-backend-bytes (docs/operations.md,
// "etcd"). Members that do not answer are skipped; when none does, the
// gauges keep their last value.
func (m *Metrics) PollDBSize(ctx context.Context, cli *clientv3.Client, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m.pollDBSize(ctx, cli, interval)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Metrics) pollDBSize(ctx context.Context, cli *clientv3.Client, timeout time.Duration) {
	var size, inUse int64
	answered := 0
	for _, ep := range cli.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, min(timeout, 5*time.Second))
		st, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			log.G(ctx).WithError(err).WithField("endpoint", ep).Debug("etcd status for the database size")
			continue
		}
		answered++
		size, inUse = max(size, st.DbSize), max(inUse, st.DbSizeInUse)
	}
	if answered > 0 {
		m.dbSize.Set(float64(size))
		m.dbInUse.Set(float64(inUse))
	}
}
