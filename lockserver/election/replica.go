package election

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/containerd/log"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// Replica is one coordinator replica: its election loop (Run), its
// Leadership and its metrics.
type Replica struct {
	cli     *clientv3.Client
	opts    Options
	cfg     lockserver.Config
	lead    *leadership
	metrics *metrics
	// warm keeps the members' hashes while the replica stands by, for
	// its next term's Coordinator (docs/design.md §7.2); nil while it
	// leads.
	warm *standbyHashes
}

// standbyHashes is a running etcdstore.Warm and its end.
type standbyHashes struct {
	*etcdstore.Warm
	stop context.CancelFunc
}

// New returns a replica that campaigns through cli with opts (validated)
// and serves Coordinators configured by cfg.
func New(cli *clientv3.Client, opts Options, cfg lockserver.Config) (*Replica, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if !opts.Enabled() {
		return nil, errors.New("election: no etcd endpoints")
	}
	return &Replica{cli: cli, opts: opts, cfg: cfg, lead: newLeadership(opts.AdvertiseURL), metrics: newMetrics()}, nil
}

// dbSizeInterval is how often a replica reads etcd's database size.
const dbSizeInterval = 30 * time.Second

// Leadership is the replica's role, for httpserver.Config.Leadership.
func (r *Replica) Leadership() httpserver.Leadership { return r.lead }

// Gatherer serves the replica's metrics and its last term's Coordinator's.
func (r *Replica) Gatherer() prometheus.Gatherer { return r.metrics }

// electionPrefix is where the replicas campaign: their keys are
// <prefix>leader/<lease ID>.
func (r *Replica) electionPrefix() string { return r.opts.prefix() + "leader" }

func (o Options) prefix() string {
	if o.Prefix[len(o.Prefix)-1] == '/' {
		return o.Prefix
	}
	return o.Prefix + "/"
}

// Run campaigns, leads and stands by, term after term, until ctx ends;
// h serves the Coordinator of each term won. A leader whose ctx ends
// resigns, so that another replica takes over at once.
func (r *Replica) Run(ctx context.Context, h *httpserver.Handler) {
	go r.metrics.etcd.PollDBSize(ctx, r.cli, dbSizeInterval)
	defer r.stopWarm()
	for ctx.Err() == nil {
		err := r.term(ctx, h)
		if ctx.Err() != nil {
			return
		}
		log.G(ctx).WithError(err).Warn("election: standing by; campaigning again with a new etcd session")
		// A short jittered pause: a replica whose etcd is down does not
		// spin, and replicas do not all come back in step.
		pause := time.NewTimer(time.Duration(100+rand.IntN(200)) * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-pause.C:
		}
		pause.Stop()
	}
}

// startWarm starts keeping the members' hashes, unless it already does:
// one walk, then etcd's watch, off the path of any request.
func (r *Replica) startWarm(ctx context.Context) {
	if r.warm != nil {
		return
	}
	wctx, stop := context.WithCancel(ctx)
	r.warm = &standbyHashes{Warm: etcdstore.StartWarm(wctx, r.cli, r.opts.prefix(), 0), stop: stop}
}

// stopWarm stops keeping the hashes: a leader's Coordinator keeps its own.
func (r *Replica) stopWarm() {
	if r.warm != nil {
		r.warm.stop()
		<-r.warm.Stopped()
		r.warm = nil
	}
}

// stepDown names why a term ended.
type stepDown struct {
	reason string // the metric's label
	err    error
}

func (s *stepDown) Error() string { return s.reason + ": " + s.err.Error() }
func (s *stepDown) Unwrap() error { return s.err }

// term is one etcd session: campaign, lead until a reason to step down,
// step down. It returns why the term ended.
func (r *Replica) term(ctx context.Context, h *httpserver.Handler) error {
	ttl := r.opts.SessionTTL
	granted := time.Now() // before the grant is sent: the lease outlives granted + ttl
	// The lease's grant has a deadline of its own: a replica that cannot
	// reach etcd learns it within a TTL, and answers so.
	gctx, cancelGrant := context.WithTimeout(ctx, ttl)
	lease, err := r.cli.Grant(gctx, int64(ttl/time.Second))
	cancelGrant()
	if err != nil {
		if ctx.Err() == nil {
			r.lead.etcdContact(fmt.Errorf("grant the etcd session's lease: %w", err))
		}
		return fmt.Errorf("election: new etcd session: %w", err)
	}
	r.lead.etcdContact(nil)
	sess, err := concurrency.NewSession(r.cli, concurrency.WithLease(lease.ID), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("election: new etcd session: %w", err)
	}
	rel := newRelease()
	// Revokes the lease (the election key goes with it), in the
	// background until etcd answers.
	defer rel.Do(ctx, r.cli, sess, ttl)
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ka := newKeepalive(r.cli, sess.Lease(), ttl, granted)
	ka.report = r.lead.etcdContact
	go ka.run(tctx)
	e := concurrency.NewElection(sess, r.electionPrefix())
	go r.observe(tctx, concurrency.NewElection(sess, r.electionPrefix()))
	r.startWarm(ctx)

	// Campaigning ends with the session too. A cancelled Campaign
	// resigns through the client's own context (etcd's concurrency
	// package), which waits for as long as etcd does not answer: the term
	// does not wait for it, the lease's release deletes the key anyway.
	cctx, stopCampaign := context.WithCancel(tctx)
	won := make(chan error, 1)
	go func() { won <- e.Campaign(cctx, r.opts.AdvertiseURL) }()
	select {
	case err = <-won:
	case <-sess.Done():
		err = errors.New("the etcd session ended")
	case <-ka.Lapsed():
		err = errors.New("no keepalive acknowledged in time")
	case <-tctx.Done():
		err = tctx.Err()
	}
	stopCampaign()
	if err != nil {
		return fmt.Errorf("election: campaign: %w", err)
	}
	return r.leadTerm(ctx, tctx, h, sess, rel, e, ka)
}

// leadTerm serves a Coordinator on the store guarded by the won election
// until a reason to step down, then steps down.
func (r *Replica) leadTerm(ctx, tctx context.Context, h *httpserver.Handler, sess *concurrency.Session, rel *release, e *concurrency.Election, ka *keepalive) error {
	won := time.Now()
	resign := func() {
		rctx, cancel := context.WithTimeout(context.Background(), r.opts.SessionTTL)
		defer cancel()
		_ = e.Resign(rctx)
	}
	store, err := etcdstore.OpenElection(tctx, r.cli, r.opts.prefix(), e,
		etcdstore.Options{FlushInterval: r.opts.FlushInterval, Metrics: r.metrics.etcd})
	if err != nil {
		resign()
		return fmt.Errorf("election: open the etcd store: %w", err)
	}
	fenced := make(chan error, 1)
	st := reportFenced(store, func(err error) {
		select {
		case fenced <- err:
		default:
		}
	})
	reg := prometheus.NewRegistry()
	// The Coordinator's start moves the epoch on in its first guarded
	// write: nodes re-sync as after a restart (docs/design.md §8.10).
	refs := refcount.NewManager(st)
	if r.warm != nil {
		refs.WarmHashes(r.warm)
	}
	coord, err := lockserver.NewCoordinator(r.cfg, lockserver.Options{Refs: refs, Registerer: reg})
	if err != nil { // still a standby: the hashes are kept on
		store.Close()
		resign()
		return fmt.Errorf("election: start the coordinator: %w", err)
	}
	r.metrics.term.Store(reg)
	h.SetCoordinator(coord)
	r.lead.lead(ka)
	r.stopWarm() // after the first answers: the Coordinator keeps its own hashes
	r.metrics.leader.Set(1)
	r.metrics.changes.Inc()
	c := coord.Cluster()
	how, _ := refs.HashesBuilt()
	log.G(ctx).WithField("fence", e.Rev()).WithField("cluster", c.ClusterID).WithField("epoch", c.Epoch).
		WithField("advertise_url", r.opts.AdvertiseURL).WithField("hashes", how).WithField("ready_seconds", time.Since(won).Seconds()).Info("election: leading")

	var why *stepDown
	select {
	case <-sess.Done():
		why = &stepDown{"session_lost", errors.New("the etcd session ended (its lease expired or was revoked)")}
	case err := <-fenced:
		why = &stepDown{"fenced", err}
	case <-ka.Lapsed():
		why = &stepDown{"keepalive_lapsed", errors.New("no keepalive acknowledged in time; the lease may lapse")}
	case <-ctx.Done():
		why = &stepDown{"shutdown", ctx.Err()}
	}
	// Stop answering first; then nothing of the term's Coordinator can
	// be written (the store is closed) and its streams and queues go.
	r.lead.standBy()
	r.metrics.leader.Set(0)
	r.metrics.changes.Inc()
	r.metrics.stepped.WithLabelValues(why.reason).Inc()
	log.G(ctx).WithError(why.err).WithField("reason", why.reason).WithField("fence", e.Rev()).Warn("election: stepped down")
	if why.reason == "shutdown" {
		// Still the owner: the Coordinator saves what it keeps in
		// memory (the update leases held, which the next leader adopts,
		// and the members' last sessions; for a TTL at most: etcd may
		// be gone), then the next leader need not wait for the lease
		// (docs/design.md §7.2).
		closed := make(chan struct{})
		go func() { defer close(closed); coord.Close() }()
		wait := time.NewTimer(r.opts.SessionTTL)
		select {
		case <-closed:
		case <-wait.C:
			log.G(ctx).Warn("election: the coordinator did not close within the session TTL; leaving without saving")
		}
		wait.Stop()
		store.Close()
		resign()
		return why
	}
	// The lease goes first: its keepalive stops and the election key is
	// revoked as soon as etcd answers, so that another replica can win
	// while this one closes (the store is fenced by that key: nothing of
	// the term is written after it). Else the session's keepalive would
	// keep the key for as long as the close takes.
	rel.Do(ctx, r.cli, sess, r.opts.SessionTTL)
	store.Close() // a write of the closing Coordinator fails at once
	coord.Close()
	return why
}

// observe keeps the leader's URL for the standby's not_leader answers.
func (r *Replica) observe(ctx context.Context, e *concurrency.Election) {
	for resp := range e.Observe(ctx) {
		if len(resp.Kvs) > 0 {
			r.lead.observed(string(resp.Kvs[0].Value))
		}
	}
}
