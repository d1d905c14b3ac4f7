package main

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sharedcontent/sharedcontent/lockserver/election"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

// replica is the election of a server run with --etcd-endpoints
// (docs/design.md §7).
type replica struct {
	cli *clientv3.Client
	*election.Replica
}

func (r *replica) run(ctx context.Context, h *httpserver.Handler) { r.Run(ctx, h) }
func (r *replica) close()                                         { r.cli.Close() }

// open opens the server: a single coordinator on the data directory, or
// with etcd endpoints a standby replica (and its election, which the
// caller runs).
func open(o options) (*httpserver.Server, *replica, error) {
	if !o.etcd.Enabled() {
		srv, err := httpserver.Open(o.cfg)
		return srv, nil, err
	}
	cli, err := election.NewClient(context.Background(), o.etcd)
	if err != nil {
		return nil, nil, err
	}
	rep, err := election.New(cli, o.etcd, o.cfg.CoordinatorConfig())
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	cfg := o.cfg
	cfg.Leadership = rep.Leadership()
	srv, err := httpserver.NewStandby(cfg, rep.Gatherer())
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return srv, &replica{cli: cli, Replica: rep}, nil
}
