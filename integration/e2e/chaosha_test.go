package e2e

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
)

// TestChaosRealHA's coordinator: replicas on a real etcd cluster
// (docs/design.md §7), started with the helpers of TestFailoverDuringPulls.

// chaosLeaderTimeout bounds the wait for a replica to lead: after a
// leader fault, a kill -9 costs a session TTL (replicaSessionTTL); after
// etcd's quorum is back, etcd's election comes first.
const chaosLeaderTimeout = time.Minute

// chaosHA is TestChaosRealHA's coordinator: a real 3-member etcd and three
// replicas on it.
type chaosHA struct {
	etcd *etcdtest.Cluster
	reps []*lockServer
}

// chaosModeName names the chaos run's coordinator and, on GlusterFS, its
// filesystem, for its lines.
func chaosModeName(ha *chaosHA, glusterfs bool) string {
	name := "3 coordinator replicas on a 3-member etcd"
	if ha == nil {
		name = "stand-alone coordinator (bbolt)"
	}
	if glusterfs {
		name += ", roots on a replica-3 GlusterFS volume"
	}
	return name
}

// starter returns faultOpts.coordinator: nil on a stand-alone coordinator;
// else it starts three replicas with args and returns the first leader.
func (ha *chaosHA) starter(args []string) func(e *env) *lockServer {
	if ha == nil {
		return nil
	}
	return func(e *env) *lockServer {
		for _, l := range ha.etcd.Logs() {
			e.addLog(l)
		}
		ha.reps = e.startReplicas(3, ha.etcd.Endpoints(), args...)
		return awaitLeader(e.t, ha.reps, nil)
	}
}

// replicasOr returns the replicas, or ls alone on a stand-alone
// coordinator.
func (ha *chaosHA) replicasOr(ls *lockServer) []*lockServer {
	if ha == nil {
		return []*lockServer{ls}
	}
	return ha.reps
}

// name is a replica's name, for logs: its log's.
func (l *lockServer) name() string { return strings.TrimSuffix(l.log, ".log") }

// coordinator returns the coordinator that serves now: the stand-alone
// one, or the replica that answers /readyz 200 (nil: none leads).
func (ch *realChaos) coordinator() *lockServer {
	if ch.ha == nil {
		return ch.c.ls
	}
	for _, r := range ch.ha.reps {
		if !r.p.exited() && r.ready() {
			return r
		}
	}
	return nil
}

// awaitLeader waits up to chaosLeaderTimeout for a replica but not to
// lead, and returns it (nil and a heal error when none did).
func (ch *realChaos) awaitLeader(not *lockServer, why string) *lockServer {
	deadline := time.Now().Add(chaosLeaderTimeout)
	for {
		for _, r := range ch.ha.reps {
			if r != not && !r.p.exited() && r.ready() {
				return r
			}
		}
		if time.Now().After(deadline) {
			ch.healError("%s: no replica leads within %v", why, chaosLeaderTimeout)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// failedOver waits for another replica than old to lead after a fault of
// kind that began at since, and records how long that took.
func (ch *realChaos) failedOver(kind string, old *lockServer, since time.Time) {
	next := ch.awaitLeader(old, kind+" of "+old.name())
	if next == nil {
		return
	}
	d := time.Since(since)
	ch.mu.Lock()
	ch.failovers[kind] = append(ch.failovers[kind], d)
	ch.mu.Unlock()
	ch.t.Logf("chaos: %s leads %.2fs after the %s of %s", next.name(), d.Seconds(), kind, old.name())
}

// haTarget picks the target of an HA fault before it begins: the leading
// replica, or the etcd members. ok is false (and a heal error recorded)
// when no replica leads.
func (ch *realChaos) haTarget(kind string, p *faultPlan) (string, bool) {
	switch kind {
	case "leader-kill", "leader-term", "leader-stop":
		p.leader = ch.awaitLeader(nil, "before "+kind)
		if p.leader == nil {
			return "", false
		}
		return p.leader.name() + " (leader)", true
	case "etcd-member-kill":
		if p.etcdLeader {
			p.member = ch.ha.etcd.Leader(ch.t)
			return fmt.Sprintf("etcd m%d (etcd's leader)", p.member), true
		}
		return fmt.Sprintf("etcd m%d", p.member), true
	case "etcd-quorum-loss":
		return fmt.Sprintf("etcd m%d, m%d", p.member, p.other), true
	}
	return "", false
}

// haFault applies an HA fault (chaosHAFaults) and heals it.
func (ch *realChaos) haFault(kind string, p faultPlan) {
	switch kind {
	case "leader-kill", "leader-term":
		l := p.leader
		since := time.Now()
		if kind == "leader-kill" {
			l.p.kill()
			ch.failedOver(kind, l, since)
		} else {
			// Another replica leads while this one is still exiting.
			l.p.signal(syscall.SIGTERM)
			ch.failedOver(kind, l, since)
			select {
			case <-l.p.done:
			case <-time.After(stopGrace):
				l.p.kill()
				ch.healError("%s did not stop within %v of SIGTERM", l.name(), stopGrace)
			}
		}
		time.Sleep(p.down)
		l.launch()
	case "leader-stop":
		ch.leaderStop(p)
	case "etcd-member-kill":
		ch.ha.etcd.Kill(p.member)
		time.Sleep(p.hold)
		ch.ha.etcd.Restart(ch.t, p.member)
		ch.ha.etcd.WaitHealthy(ch.t)
	case "etcd-quorum-loss":
		ch.ha.etcd.Kill(p.member)
		ch.ha.etcd.Kill(p.other)
		lost := time.Now()
		time.Sleep(p.quorumDown)
		ch.ha.etcd.Restart(ch.t, p.member)
		ch.ha.etcd.Restart(ch.t, p.other)
		ch.ha.etcd.WaitHealthy(ch.t)
		back := time.Now()
		if l := ch.awaitLeader(nil, "after etcd's quorum is back"); l != nil {
			ch.t.Logf("chaos: %s leads %.2fs after etcd's quorum is back (lost for %.1fs)",
				l.name(), time.Since(back).Seconds(), back.Sub(lost).Seconds())
		}
	}
}

// leaderStop stops the leader (SIGSTOP) past its etcd session's TTL and
// until another replica leads, then resumes it (SIGCONT). Resumed, it must
// refuse its first request (docs/design.md §7.2, the watchdog): /readyz
// 200 from it then is two leaders at once.
func (ch *realChaos) leaderStop(p faultPlan) {
	l := p.leader
	since := time.Now()
	l.p.signal(syscall.SIGSTOP)
	ch.failedOver("leader-stop", l, since)
	if d := p.paused - time.Since(since); d > 0 {
		time.Sleep(d)
	}
	l.p.signal(syscall.SIGCONT)
	if l.ready() {
		ch.healError("leader-stop: %s answers /readyz 200 at once after SIGCONT (%.1fs stopped), as another replica leads",
			l.name(), time.Since(since).Seconds())
	}
}

// coordinatorDown stops the coordinator: every replica (kill: -9, else
// SIGTERM), or the stand-alone one.
func (ch *realChaos) coordinatorDown(kill bool) {
	for _, l := range ch.ha.replicasOr(ch.c.ls) {
		if kill {
			l.p.kill()
		} else if l.p.stop(stopGrace) {
			ch.t.Logf("chaos: the coordinator (%s) did not stop within %v of SIGTERM; killed", l.p.name, stopGrace)
		}
	}
}

// coordinatorUp starts the coordinator again: the stand-alone one (and
// waits until it is ready), or every replica (and waits until one leads).
func (ch *realChaos) coordinatorUp() {
	if ch.ha == nil {
		ch.c.ls.start()
		return
	}
	for _, l := range ch.ha.reps {
		l.launch()
	}
	ch.awaitLeader(nil, "after every replica restarted")
}

// coordinatorLogs are the coordinator's log files.
func (ch *realChaos) coordinatorLogs() []string {
	var out []string
	for _, l := range ch.ha.replicasOr(ch.c.ls) {
		name := l.log
		if name == "" {
			name = "lockserver.log"
		}
		out = append(out, ch.c.e.path(name))
	}
	return out
}

// failoverText formats the failover times by kind for the summary.
func failoverText(m map[string][]time.Duration) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		ds := slices.Clone(m[k])
		slices.Sort(ds)
		out = append(out, fmt.Sprintf("%s %d× %.2f–%.2fs", k, len(ds), ds[0].Seconds(), ds[len(ds)-1].Seconds()))
	}
	if len(out) == 0 {
		return ""
	}
	return "; another replica leading after: " + strings.Join(out, ", ")
}

// errNoLeader is synced's error while no replica leads.
var errNoLeader = errors.New("no replica leads")
