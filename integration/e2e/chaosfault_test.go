package e2e

import (
	"os"
	"slices"
	"strings"
	"time"

	"github.com/stretchr/testify/require"
)

// faultPlan is one fault's random draws, all made whatever the kind, so a
// seed replays the same faults.
type faultPlan struct {
	n *chaosNode
	// hold is how long a link fault lasts.
	hold time.Duration
	// delay is later than a third of the session TTL: a renewal sent on
	// time arrives after the next one was due.
	delay time.Duration
	// gap is how long a killed containerd or coordinator stays down.
	gap time.Duration
	// down is how long a killed or wiped plugin stays down: up to three
	// session TTLs, so its session at the coordinator may outlive it or
	// lapse.
	down time.Duration
	// long is longer than --node-expiry, with the session's TTL on top.
	long time.Duration

	// On etcd only (TestChaosRealHA), drawn after the rest so that a
	// stand-alone run's seed replays as before.
	//
	// paused is how long a stopped leader stays stopped at least: past
	// its etcd session's TTL.
	paused time.Duration
	// quorumDown is how long etcd's quorum stays lost: 5–40 s, so more
	// than the nodes' fail-open delay about half of the time (23.5 s: the
	// plugins count with their default 15 s session TTL, docs/design.md
	// §8.8).
	quorumDown time.Duration
	// member and other are two distinct etcd members; etcdLeader says
	// whether etcd-member-kill picks etcd's leader instead of member.
	member, other int
	etcdLeader    bool
	// leader is the leading replica, found when a leader fault begins.
	leader *lockServer
}

func (ch *realChaos) plan() faultPlan {
	p := faultPlan{
		n:     ch.nodes[ch.rng.IntN(len(ch.nodes))],
		hold:  3*time.Second + time.Duration(ch.rng.Int64N(int64(17*time.Second))),
		delay: chaosSessionTTL/3 + 100*time.Millisecond + time.Duration(ch.rng.Int64N(int64(chaosSessionTTL/3))),
		gap:   time.Duration(ch.rng.Int64N(int64(2 * time.Second))),
		down:  time.Duration(ch.rng.Int64N(int64(3 * chaosSessionTTL))),
		long:  chaosNodeExpiry + chaosSessionTTL + 5*time.Second + time.Duration(ch.rng.Int64N(int64(15*time.Second))),
	}
	if ch.ha != nil {
		p.paused = replicaSessionTTL + time.Second + time.Duration(ch.rng.Int64N(int64(5*time.Second)))
		p.member = ch.rng.IntN(3)
		p.other = (p.member + 1 + ch.rng.IntN(2)) % 3
		p.etcdLeader = ch.rng.IntN(2) == 0
		p.quorumDown = 5*time.Second + time.Duration(ch.rng.Int64N(int64(35*time.Second)))
	}
	return p
}

// inject applies one fault of kind to a random node (or the coordinator,
// or etcd), and heals it before it returns.
func (ch *realChaos) inject(kind string) {
	p := ch.plan()
	target := p.n.id
	coordinator := "coordinator"
	if ch.ha != nil {
		coordinator = "every replica"
	}
	switch kind {
	case "kill-coordinator":
		target = coordinator
	case "coordinator-down-long":
		target = coordinator + ", " + p.n.id + " slow back"
	case "fill":
		target = "the shared filesystem"
	case "brick-kill", "brick-kill-all":
		target = ch.targetBrick(kind, p)
	}
	if slices.Contains(chaosHAFaults, kind) {
		var ok bool
		if target, ok = ch.haTarget(kind, &p); !ok {
			return
		}
	}
	f := ch.begin(kind, target)
	defer ch.end(f)
	switch kind {
	case "kill-plugin", "kill-containerd", "kill-node", "wipe-state":
		ch.nodeFault(kind, p)
	case "kill-coordinator":
		ch.coordinatorDown(true)
		time.Sleep(p.gap)
		ch.coordinatorUp()
	case "leader-kill", "leader-term", "leader-stop", "etcd-member-kill", "etcd-quorum-loss":
		ch.haFault(kind, p)
	case "coordinator-down-long":
		ch.coordinatorDownLong(p)
	case "blackhole":
		ch.cut(p.n, proxyDrop, p.hold)
	case "refuse":
		ch.cut(p.n, proxyRefuse, p.hold)
	case "cut-past-expiry":
		ch.cut(p.n, proxyDrop, p.long)
	case "delay", "late-keepalives":
		ch.late(kind, p)
	case "unmount", "read-only", "fill", "freeze":
		ch.storageFault(kind, p)
	case "brick-kill", "brick-kill-all":
		ch.brickFault(kind, p)
	default:
		ch.t.Fatalf("chaos: unknown fault kind %q", kind)
	}
}

// coordinatorDownLong stops the coordinator (every replica) for longer
// than its --node-expiry (a weekend). One node is slow to come back: its
// link is refused from the stop until 3–5 s after the restart, longer than
// the coordinator's expiry tick (--node-expiry/10).
func (ch *realChaos) coordinatorDownLong(p faultPlan) {
	ch.coordinatorDown(false)
	p.n.link.set(proxyRefuse)
	time.Sleep(p.long)
	ch.coordinatorUp()
	time.Sleep(3*time.Second + p.gap)
	p.n.link.set(proxyUp)
}

// nodeFault kills (or stops and wipes) a node's processes and starts them
// again; the node starts no operation meanwhile.
func (ch *realChaos) nodeFault(kind string, p faultPlan) {
	n := p.n
	n.setDown()
	defer n.setUp()
	switch kind {
	case "kill-plugin":
		n.plugin.kill()
		time.Sleep(p.down)
		n.startPlugin()
	case "kill-containerd":
		n.containerd.kill()
		time.Sleep(p.gap)
		n.startContainerd(n.config(true))
	case "kill-node":
		n.containerd.kill()
		n.plugin.kill()
		time.Sleep(p.gap)
		n.startPlugin()
		n.startContainerd(n.config(true))
	case "wipe-state":
		n.plugin.stop(stopGrace)
		require.NoError(ch.t, os.RemoveAll(n.stateDir()))
		time.Sleep(p.down)
		ch.release(n)
		n.startPlugin()
	}
}

// release is the operator's `sharedcontentctl node release` of n's node
// ID: a node whose state dir was wiped is another lineage, refused until
// then (docs/design.md §8.5). It retries while the coordinator is down or
// n's session has not lapsed yet (a stop that could not end it).
func (ch *realChaos) release(n *chaosNode) {
	var urls []string
	for _, c := range ch.ha.replicasOr(ch.c.ls) {
		urls = append(urls, c.url())
	}
	require.Eventually(ch.t, func() bool {
		_, err := ctl(ch.t, "--coordinator", strings.Join(urls, ","), "node", "release", n.id)
		return err == nil
	}, 2*time.Minute, time.Second, "sharedcontentctl node release %s after its state dir was wiped", n.id)
}

// late delays a node's requests (delay) or only its session renewals,
// black-holing the rest (late-keepalives), for p.hold.
func (ch *realChaos) late(kind string, p faultPlan) {
	if kind == "delay" {
		p.n.link.setDelay(proxyDelay, p.delay)
		ch.t.Logf("chaos: %s's requests delayed %v", p.n.id, p.delay)
	} else {
		p.n.link.setDelay(proxyKeepalive, p.delay)
		ch.t.Logf("chaos: %s's session renewals delayed %v, its other requests black-holed", p.n.id, p.delay)
	}
	time.Sleep(p.hold)
	p.n.link.set(proxyUp)
}

// cut switches n's coordinator link to mode for d, then back up.
func (ch *realChaos) cut(n *chaosNode, mode proxyMode, d time.Duration) {
	n.link.set(mode)
	time.Sleep(d)
	n.link.set(proxyUp)
}

// begin records the start of a fault.
func (ch *realChaos) begin(kind, target string) int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.faults[kind]++
	ch.history = append(ch.history, faultRecord{kind: kind, target: target, start: time.Now()})
	ch.t.Logf("chaos: fault %d: %s %s", len(ch.history), kind, target)
	return len(ch.history) - 1
}

// end records that fault i has healed.
func (ch *realChaos) end(i int) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.history[i].end = time.Now()
	ch.t.Logf("chaos: fault %d healed: %s", i+1, ch.history[i])
}
