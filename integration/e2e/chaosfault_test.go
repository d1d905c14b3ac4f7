package e2e

import (
	"os"
	"time"

	"github.com/stretchr/testify/require"
)

// inject applies one fault of kind to a random node (or the coordinator),
// and heals it before it returns. Every random draw is made whatever the
// kind, so a seed replays the same faults.
func (ch *realChaos) inject(kind string) {
	t := ch.t
	n := ch.nodes[ch.rng.IntN(len(ch.nodes))]
	hold := 3*time.Second + time.Duration(ch.rng.Int64N(int64(17*time.Second)))
	// Later than a third of the session TTL: a renewal sent on time
	// arrives after the next one was due.
	delay := chaosSessionTTL/3 + 100*time.Millisecond + time.Duration(ch.rng.Int64N(int64(chaosSessionTTL/3)))
	gap := time.Duration(ch.rng.Int64N(int64(2 * time.Second)))
	// A plugin down for up to three session TTLs: its session at the
	// coordinator may outlive it or lapse.
	down := time.Duration(ch.rng.Int64N(int64(3 * chaosSessionTTL)))
	// Longer than --node-expiry, with the session's TTL on top.
	long := chaosNodeExpiry + chaosSessionTTL + 5*time.Second + time.Duration(ch.rng.Int64N(int64(15*time.Second)))

	target := n.id
	if kind == "kill-coordinator" || kind == "coordinator-down-long" {
		target = "coordinator"
	}
	f := ch.begin(kind, target)
	defer ch.end(f)
	switch kind {
	case "kill-plugin":
		n.setDown()
		n.plugin.kill()
		time.Sleep(down)
		n.startPlugin()
		n.setUp()
	case "kill-containerd":
		n.setDown()
		n.containerd.kill()
		time.Sleep(gap)
		n.startContainerd(n.config(true))
		n.setUp()
	case "kill-node":
		n.setDown()
		n.containerd.kill()
		n.plugin.kill()
		time.Sleep(gap)
		n.startPlugin()
		n.startContainerd(n.config(true))
		n.setUp()
	case "kill-coordinator":
		ch.c.ls.p.kill()
		time.Sleep(gap)
		ch.c.ls.start()
	case "coordinator-down-long":
		ch.c.ls.p.stop(stopGrace)
		time.Sleep(long)
		ch.c.ls.start()
	case "blackhole":
		ch.cut(n, proxyDrop, hold)
	case "refuse":
		ch.cut(n, proxyRefuse, hold)
	case "cut-past-expiry":
		ch.cut(n, proxyDrop, long)
	case "delay":
		n.proxy.setDelay(proxyDelay, delay)
		t.Logf("chaos: %s's requests delayed %v", n.id, delay)
		time.Sleep(hold)
		n.proxy.set(proxyUp)
	case "late-keepalives":
		n.proxy.setDelay(proxyKeepalive, delay)
		t.Logf("chaos: %s's session renewals delayed %v, its other requests black-holed", n.id, delay)
		time.Sleep(hold)
		n.proxy.set(proxyUp)
	case "wipe-state":
		n.setDown()
		n.plugin.stop(stopGrace)
		require.NoError(t, os.RemoveAll(n.stateDir()))
		time.Sleep(down)
		n.startPlugin()
		n.setUp()
	default:
		t.Fatalf("chaos: unknown fault kind %q", kind)
	}
}

// cut switches n's coordinator link to mode for d, then back up.
func (ch *realChaos) cut(n *chaosNode, mode proxyMode, d time.Duration) {
	n.proxy.set(mode)
	time.Sleep(d)
	n.proxy.set(proxyUp)
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
