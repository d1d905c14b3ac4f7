package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// The crash points (docs/design.md §8.16): the daemons are built
// with the tag `failpoints`; for each point in turn the process it lives in
// is restarted with it armed ("exit": os.Exit at that point, as a kill -9),
// the operation that reaches it is driven with ctr or sharedcontentctl, the
// process is restarted without it, and the cluster must come back whole:
// every blob every node's containerd lists reads back, everything the
// point's scenario pulled can be removed and leaves nothing behind, and a
// delete goes through.

const (
	// crashTTL is the coordinator's --session-ttl and --lease-ttl here: a
	// crashed holder or session is over after this long.
	crashTTL = 3 * time.Second
	// crashLayer is the layer size of the scenarios' images.
	crashLayer = 256 << 10
	// reachTimeout bounds the wait for an armed process to die at its point.
	reachTimeout = 45 * time.Second
	// settleTimeout bounds the reclaiming of leftovers (the next GC, the
	// reaper's passes, a lapsed lease).
	settleTimeout = 30 * time.Second
	// envCrashPoints, a comma-separated list of failpoints, runs only
	// those.
	envCrashPoints = "SHAREDCONTENT_E2E_CRASH_POINTS"
)

// fpBins are our daemons built with the tag `failpoints`, built the first
// time a test needs them.
var fpBins struct {
	once               sync.Once
	plugin, lockserver string
	skip               string
}

func needFailpoints(t *testing.T) {
	t.Helper()
	needCtl(t)
	fpBins.once.Do(buildFailpoints)
	if fpBins.skip != "" {
		t.Skip(fpBins.skip)
	}
}

// prebuildFailpoints starts building the failpoint daemons in the
// background when the run may select TestCrashPoints, which runs
// alongside the others, after every test that runs alone: their builds
// (about 40 s on 2 cores, race-built) are over by then instead of
// delaying its start. needFailpoints waits for them (fpBins.once).
func prebuildFailpoints() {
	if skipContainerd == "" && skipSharedcontent == "" && skipCtl == "" && selected("TestCrashPoints") {
		go fpBins.once.Do(buildFailpoints)
	}
}

// buildFailpoints builds the failpoint variant of our daemons into
// <binDir>/failpoints, with the race detector as the others.
func buildFailpoints() {
	dir := filepath.Join(binDir, "failpoints")
	flags := []string{"build", "-trimpath", "-tags", "failpoints"}
	if raceBuild {
		flags = append(flags, "-race")
	}
	for _, b := range []struct {
		name string
		dst  *string
	}{
		{"sharedcontent-lockserver", &fpBins.lockserver},
		{"containerd-sharedcontent", &fpBins.plugin},
	} {
		t0 := time.Now()
		out := filepath.Join(dir, b.name)
		args := append(append([]string{}, flags...), "-o", out, "./cmd/"+b.name)
		if msg, err := run(repoRoot, nil, "go", args...); err != nil {
			fpBins.skip = fmt.Sprintf("e2e: skipped; cannot build the failpoint daemons: go %s: %v\n%s", strings.Join(args, " "), err, tail(msg, 30))
			return
		}
		*b.dst = out
		fmt.Printf("e2e: built %s with failpoints (race=%v, %.1fs)\n", b.name, raceBuild, time.Since(t0).Seconds())
	}
}

// crashKind is the scenario that reaches a point.
type crashKind int

const (
	kindWrite     crashKind = iota // n1 pulls a fresh image
	kindDelete                     // n1 removes an image only it uses (GC)
	kindSync                       // n1's plugin starts after its session lapsed
	kindCoordSync                  // the coordinator restarts; every node re-syncs
	kindAdopt                      // the coordinator is wiped; an operator adopts the root
	kindForget                     // n3 is stopped; an operator forgets it
)

// crashPoint is one failpoint and where it lives.
type crashPoint struct {
	name  string
	coord bool // in the coordinator; else in n1's plugin
	kind  crashKind
}

var crashPoints = []crashPoint{
	{failpoint.StoreWritePullLocked, false, kindWrite},
	{failpoint.StoreRefAfterJournal, false, kindWrite},
	{failpoint.StoreRefAfterCoord, false, kindWrite},
	{failpoint.StoreWriteBeforeRename, false, kindWrite},
	{failpoint.StoreWriteAfterRename, false, kindWrite},
	{failpoint.StoreWriteAfterUnlock, false, kindWrite},
	{failpoint.StoreDeleteGranted, false, kindDelete},
	{failpoint.StoreDeleteAfterJournal, false, kindDelete},
	{failpoint.StoreDeleteAfterCheck, false, kindDelete},
	{failpoint.StoreDeleteAfterTrash, false, kindDelete},
	{failpoint.StoreDeleteAfterUnlock, false, kindDelete},
	{failpoint.StoreDeleteAfterUnlink, false, kindDelete},
	{failpoint.StoreSessionAnswered, false, kindSync},
	{failpoint.StoreSyncAnnounced, false, kindSync},
	{failpoint.StoreSyncSnapshot, false, kindSync},
	{failpoint.StoreSyncAfterChunk, false, kindSync},
	{failpoint.StoreSyncAfterDone, false, kindSync},
	{failpoint.CoordAddRefBefore, true, kindWrite},
	{failpoint.CoordAddRefAfter, true, kindWrite},
	{failpoint.CoordUnlockPullBefore, true, kindWrite},
	{failpoint.CoordUnlockPullAfter, true, kindWrite},
	{failpoint.CoordDeleteBeforeRefs, true, kindDelete},
	{failpoint.CoordDeleteAfterRefs, true, kindDelete},
	{failpoint.CoordUnlockDeleteBefore, true, kindDelete},
	{failpoint.CoordUnlockDeleteAfter, true, kindDelete},
	{failpoint.CoordSyncBeforeReplace, true, kindCoordSync},
	{failpoint.CoordSyncAfterReplace, true, kindCoordSync},
	{failpoint.CoordAdoptBeforeCommit, true, kindAdopt},
	{failpoint.CoordAdoptAfterCommit, true, kindAdopt},
	{failpoint.CoordForgetBeforeCommit, true, kindForget},
	{failpoint.CoordForgetAfterCommit, true, kindForget},
}

// crashGroups name the clusters TestCrashPoints runs its points on: n1's
// plugin's write and delete points, its session and sync points, the
// coordinator's points: 98, 40 and 80 s of points in a CI run where one
// cluster took them all in turn (218 s, 265 s with its set-up and builds).
var crashGroups = []string{"store", "sync", "coordinator"}

// crashGroup returns the group p runs in.
func crashGroup(p crashPoint) string {
	switch {
	case p.coord:
		return "coordinator"
	case p.kind == kindSync:
		return "sync"
	default:
		return "store"
	}
}

// crashOutcome is one row of the table.
type crashOutcome struct {
	point     string
	reached   string // how the process ended at the point, or "not reached: why"
	recovered string // "yes", or what did not come back
	reads     int    // blobs read back (every node's `ctr content ls`)
	lost      []string
	leaks     string // "none", or what was left after every image was removed
	deletes   string // "ok", or why a delete did not go through
	took      time.Duration
}

// crashRun is the one cluster every point runs on.
type crashRun struct {
	t    *testing.T
	c    *cluster
	base testImage // pulled on every node, kept until the end
	seq  int
	// pulled are the images the current point's scenario pulled, by ref,
	// with the nodes that hold them.
	pulled map[string][]*node
	out    *crashOutcome
}

// TestCrashPoints kills the real processes at every failpoint in turn and
// checks that the cluster comes back whole after each. The points run in
// three groups, each in turn on a cluster of its own, the groups
// alongside each other (crashGroups): a point's time goes mostly to
// waiting (a crashed session's lapse, restarts, re-syncs), and one
// cluster's faults never reach another.
func TestCrashPoints(t *testing.T) {
	alongside(t)
	needFailpoints(t)
	covered := map[string]bool{}
	for _, p := range crashPoints {
		covered[p.name] = true
	}
	for _, n := range failpoint.Names {
		require.True(t, covered[n], "failpoint %s has no crash scenario", n)
	}
	var (
		mu     sync.Mutex
		rows   []crashOutcome
		finals []string
	)
	t.Run("clusters", func(t *testing.T) {
		for _, g := range crashGroups {
			var points []crashPoint
			for _, p := range crashPoints {
				if crashGroup(p) != g {
					continue
				}
				if only := os.Getenv(envCrashPoints); only != "" && !slices.Contains(strings.Split(only, ","), p.name) {
					continue
				}
				points = append(points, p)
			}
			if len(points) == 0 {
				continue
			}
			t.Run(g, func(t *testing.T) {
				alongside(t)
				got, final := runCrashPoints(t, points)
				mu.Lock()
				defer mu.Unlock()
				rows = append(rows, got...)
				finals = append(finals, g+": "+final)
			})
		}
	})
	// The table in crashPoints' order.
	order := map[string]int{}
	for i, p := range crashPoints {
		order[p.name] = i
	}
	slices.SortFunc(rows, func(a, b crashOutcome) int { return order[a.point] - order[b.point] })
	t.Log("\n" + crashTable(rows))
	for _, o := range rows {
		// A sync sends more than one chunk only past api.MaxSyncChunk
		// (8192) journal entries; these nodes hold a few.
		if !strings.HasPrefix(o.reached, "exit") && o.point != failpoint.StoreSyncAfterChunk {
			t.Errorf("%s: %s", o.point, o.reached)
		}
		if len(o.lost) > 0 {
			t.Errorf("%s: blobs lost: %v", o.point, o.lost)
		}
		if o.leaks != "none" {
			t.Errorf("%s: leaks: %s", o.point, o.leaks)
		}
		if o.deletes != "ok" {
			t.Errorf("%s: deletes: %s", o.point, o.deletes)
		}
		if o.recovered != "yes" {
			t.Errorf("%s: not recovered: %s", o.point, o.recovered)
		}
	}
	reached := 0
	for _, o := range rows {
		if strings.HasPrefix(o.reached, "exit") {
			reached++
		}
	}
	slices.Sort(finals)
	report(t, "crash points: %d points, %d reached (process exited %d there), %s; after all images removed: %s",
		len(rows), reached, failpoint.ExitCode, lostSummary(rows), strings.Join(finals, ", "))
}

// runCrashPoints runs points in turn on a cluster of its own, then removes
// everything; it returns the outcomes and what the end left.
func runCrashPoints(t *testing.T, points []crashPoint) ([]crashOutcome, string) {
	r := newCrashRun(t)
	var rows []crashOutcome
	for _, p := range points {
		rows = append(rows, r.runPoint(p))
		if t.Failed() && r.broken() {
			break
		}
	}
	return rows, r.finalCheck()
}

func newCrashRun(t *testing.T) *crashRun {
	t.Helper()
	e := newEnv(t)
	reg, err := registry.Start()
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	c := &cluster{e: e, reg: reg, shared: e.path("shared")}
	ttl := crashTTL.String()
	c.ls = &lockServer{e: e, addr: freePort(t), dataDir: e.path("lockserver"), bin: fpBins.lockserver,
		// The coordinator's own reap grace matches the reaper's: with its
		// default (1 h) it refuses every reap delete for an hour after it
		// starts, and a blob left by a crash would leak for that long.
		args: []string{"--session-ttl", ttl, "--lease-ttl", ttl, "--reap-grace", reapGrace.String()}}
	require.NoError(t, os.MkdirAll(c.ls.dataDir, 0o700))
	c.ls.start()
	e.onCleanup(func() { c.ls.p.stop(stopGrace) })
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		var args []string
		if i == 1 {
			// One reaper (n2's), never on n1 where the store's points are
			// armed: leftovers in .trash and blobs nobody references are
			// its to reclaim.
			args = []string{"--reap-interval", reapInterval.String(), "--reap-grace", reapGrace.String()}
		}
		nd := e.newSharedNode(id, c.shared, c.ls.url(), args...)
		nd.pluginBin = fpBins.plugin
		nd.startPlugin()
		nd.startContainerd(nd.config(true))
		c.nodes = append(c.nodes, nd)
	}
	r := &crashRun{t: t, c: c}
	r.base = r.push()
	for _, res := range pullAll(c.nodes, r.base.Ref, pullTimeout) {
		require.NoError(t, res.err, "pull of the base image on %s", res.node.id)
	}
	c.ls.waitSynced(t, nodeIDs(c.nodes), syncTimeout)
	return r
}

// push pushes a fresh one-layer image.
func (r *crashRun) push() testImage {
	r.seq++
	return pushImage(r.t, r.c.reg, fmt.Sprintf("e2e/crash%d", r.seq), crashLayer)
}

func (r *crashRun) n(i int) *node { return r.c.nodes[i-1] }

// broken reports whether the cluster cannot go on (a daemon that should
// run does not).
func (r *crashRun) broken() bool {
	if r.c.ls.p.exited() {
		return true
	}
	for _, n := range r.c.nodes {
		if n.plugin.exited() || n.containerd.exited() {
			return true
		}
	}
	return false
}

// runPoint runs one point's scenario, then the checks.
func (r *crashRun) runPoint(p crashPoint) crashOutcome {
	start := time.Now()
	r.out = &crashOutcome{point: p.name, recovered: "yes"}
	r.pulled = map[string][]*node{}
	r.t.Logf("=== crash point %s", p.name)
	switch p.kind {
	case kindWrite:
		r.write(p)
	case kindDelete:
		r.delete(p)
	case kindSync:
		r.sync(p)
	case kindCoordSync:
		r.coordSync(p)
	case kindAdopt:
		r.adopt(p)
	case kindForget:
		r.forget(p)
	}
	r.check()
	r.out.took = time.Since(start)
	r.t.Logf("=== crash point %s: reached %s; recovered %s; %d blobs read back, lost %v; leaks %s; deletes %s (%.1fs)",
		p.name, r.out.reached, r.out.recovered, r.out.reads, r.out.lost, r.out.leaks, r.out.deletes, r.out.took.Seconds())
	return *r.out
}

// notRecovered records what did not come back.
func (r *crashRun) notRecovered(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.t.Logf("not recovered: %s", msg)
	if r.out.recovered == "yes" {
		r.out.recovered = msg
	} else {
		r.out.recovered += "; " + msg
	}
}

// armed is the environment that arms point.
func armed(point string) []string {
	return []string{failpoint.EnvVar + "=" + point + "=exit"}
}

// armPlugin restarts n's plugin with point armed and waits for it to serve,
// unless it dies first (a point on the way up: the session and sync).
func (r *crashRun) armPlugin(n *node, point string) {
	n.plugin.stop(stopGrace)
	n.pluginEnv = armed(point)
	n.launchPlugin()
	r.awaitServing(n)
}

// restartPlugin starts n's plugin again, unarmed, once it has died (or
// stops it first), and waits until its containerd reaches it again.
func (r *crashRun) restartPlugin(n *node) {
	n.plugin.stop(stopGrace)
	n.pluginEnv = nil
	n.startPlugin()
	r.awaitServing(n)
}

// awaitServing waits until n's containerd answers through the plugin, or
// the plugin has exited.
func (r *crashRun) awaitServing(n *node) {
	p := n.plugin
	waitFor(r.t, n.id+" serving content through its plugin", startTimeout, func() (bool, error) {
		if p.exited() {
			return true, nil
		}
		c, err := net.Dial("unix", n.pluginSock)
		if err != nil {
			return false, err
		}
		c.Close()
		_, err = n.ctr(10*time.Second, "content", "ls", "-q")
		return err == nil, err
	})
}

// armCoord restarts the coordinator with point armed.
func (r *crashRun) armCoord(point string) {
	l := r.c.ls
	l.p.stop(stopGrace)
	l.env = armed(point)
	r.launchCoord()
}

// launchCoord starts the coordinator and waits until it is ready or dead
// (an armed point on the nodes' re-sync may stop it at once).
func (r *crashRun) launchCoord() {
	l := r.c.ls
	l.launch()
	p := l.p
	waitFor(r.t, "coordinator /readyz (or its exit)", startTimeout, func() (bool, error) {
		if p.exited() {
			return true, nil
		}
		_, err := l.cluster()
		return err == nil, err
	})
}

// restartCoord starts the coordinator again, unarmed.
func (r *crashRun) restartCoord() {
	l := r.c.ls
	l.p.stop(stopGrace)
	l.env = nil
	l.start()
}

// awaitExit waits until p has died at point (exit code and its log line),
// or reachTimeout, and records how.
func (r *crashRun) awaitExit(p *proc, point string, until func() bool) {
	deadline := time.Now().Add(reachTimeout)
	for !p.exited() && time.Now().Before(deadline) && (until == nil || !until()) {
		time.Sleep(50 * time.Millisecond)
	}
	if !p.exited() {
		r.out.reached = "not reached"
		return
	}
	var exit *exec.ExitError
	code := -1
	if errors.As(p.err, &exit) {
		code = exit.ExitCode()
	}
	b, _ := os.ReadFile(p.logPath)
	line := fmt.Sprintf("failpoint %s: exit %d", point, failpoint.ExitCode)
	switch {
	case code == failpoint.ExitCode && strings.Contains(string(b), line):
		r.out.reached = fmt.Sprintf("exit %d", code)
	default:
		r.out.reached = fmt.Sprintf("died otherwise: %v", p.err)
		r.t.Errorf("%s: %s died, but not at the point: %v", point, p.name, p.err)
	}
}

// owner is the process point lives in.
func (r *crashRun) owner(p crashPoint) *proc {
	if p.coord {
		return r.c.ls.p
	}
	return r.n(1).plugin
}

// arm restarts the process p lives in with it armed.
func (r *crashRun) arm(p crashPoint) {
	if p.coord {
		r.armCoord(p.name)
	} else {
		r.armPlugin(r.n(1), p.name)
	}
}

// disarm restarts the process p lives in without it.
func (r *crashRun) disarm(p crashPoint) {
	if p.coord {
		r.restartCoord()
	} else {
		r.restartPlugin(r.n(1))
	}
}

// write: n1 pulls a fresh image and dies at the point; after the restart
// n1 pulls it again and n2 pulls it too.
func (r *crashRun) write(p crashPoint) {
	img := r.push()
	r.arm(p)
	r.waitSynced()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pull := pullAsync(ctx, r.n(1), img.Ref, pullTimeout)
	r.awaitExit(r.owner(p), p.name, nil)
	r.disarm(p)
	select {
	case res := <-pull:
		r.t.Logf("the interrupted pull: %v", res.err)
	case <-time.After(reachTimeout):
		cancel()
		r.t.Logf("the interrupted pull: still running after the restart; cancelled")
		<-pull
	}
	r.waitSynced()
	for _, n := range []*node{r.n(1), r.n(2)} {
		if err := n.pull(img.Ref, pullTimeout); err != nil {
			r.notRecovered("pull on %s after the restart: %v", n.id, err)
			continue
		}
		r.pulled[img.Ref] = append(r.pulled[img.Ref], n)
	}
}

// delete: n1 removes an image only it uses and dies in the GC's delete.
func (r *crashRun) delete(p crashPoint) {
	img := r.push()
	r.arm(p)
	r.waitSynced() // a delete is granted only then
	if err := r.n(1).pull(img.Ref, pullTimeout); err != nil {
		r.notRecovered("pull on n1 with the point armed: %v", err)
		r.pulled[img.Ref] = []*node{r.n(1)}
	}
	rm := make(chan error, 1)
	go func() { rm <- r.n(1).removeImage(img.Ref) }()
	r.awaitExit(r.owner(p), p.name, nil)
	r.disarm(p)
	r.t.Logf("the interrupted removal: %v", <-rm)
	r.waitSynced()
}

// sync: n1's plugin stops; once its session has lapsed it starts armed and
// syncs its journal on the way up.
func (r *crashRun) sync(p crashPoint) {
	n1 := r.n(1)
	r.pullOn(n1, r.n(2))
	n1.plugin.stop(stopGrace)
	waitFor(r.t, "n1's session lapsed", syncTimeout, func() (bool, error) {
		m, err := r.c.ls.members()
		return err == nil && !m[n1.id].Live, err
	})
	n1.pluginEnv = armed(p.name)
	n1.launchPlugin()
	// "Synced without it" needs proof that n1 outlived the point, which
	// comes right after the sync's last answer: being seen synced is not
	// enough (the coordinator marks it synced before the node, about to
	// exit there, has read the answer). A node still live more than a
	// session TTL after it was first seen synced has renewed its session
	// since, after the sync's end: it went past the point.
	var syncedAt time.Time
	r.awaitExit(n1.plugin, p.name, func() bool {
		m, err := r.c.ls.members()
		if err != nil || !m[n1.id].Live || !m[n1.id].Synced {
			return false
		}
		if syncedAt.IsZero() {
			syncedAt = time.Now()
		}
		return time.Since(syncedAt) > crashTTL
	})
	if r.out.reached == "not reached" {
		r.out.reached = "not reached: n1 synced without it"
	}
	r.restartPlugin(n1)
	r.waitSynced()
}

// coordSync: the coordinator restarts armed; the nodes' re-sync reaches
// the point.
func (r *crashRun) coordSync(p crashPoint) {
	r.pullOn(r.n(1), r.n(2))
	r.armCoord(p.name)
	r.awaitExit(r.c.ls.p, p.name, nil)
	r.restartCoord()
	r.waitSynced()
}

// adopt: the coordinator loses its database and starts armed; the
// operator's adopt dies at the point; after the restart the same command
// is run again.
func (r *crashRun) adopt(p crashPoint) {
	r.pullOn(r.n(1), r.n(2))
	l := r.c.ls
	l.p.stop(stopGrace)
	require.NoError(r.t, os.RemoveAll(l.dataDir))
	require.NoError(r.t, os.MkdirAll(l.dataDir, 0o700))
	l.env = armed(p.name)
	r.launchCoord()
	adopt := []string{"--coordinator", l.url(), "cluster", "adopt", "--root", r.c.shared}
	r.interrupted(p.name, adopt)
	r.restartCoord()
	if out, err := ctl(r.t, adopt...); err != nil {
		r.notRecovered("adopt run again: %s", firstLine(out))
		if out, err := ctl(r.t, append(adopt, "--force")...); err != nil {
			r.notRecovered("adopt --force: %s", firstLine(out))
		}
	}
	r.waitSynced()
}

// forget: n3 stops; once its session has lapsed the operator's forget
// dies at the point; after the restart the same command is run again, a
// delete must go through without n3, and n3 comes back (it re-joins and
// syncs its journal).
func (r *crashRun) forget(p crashPoint) {
	n3 := r.n(3)
	r.pullOn(n3, r.n(1))
	n3.containerd.stop(stopGrace)
	n3.plugin.stop(stopGrace)
	waitFor(r.t, "n3's session lapsed", syncTimeout, func() (bool, error) {
		m, err := r.c.ls.members()
		return err == nil && !m[n3.id].Live, err
	})
	r.armCoord(p.name)
	forget := []string{"--coordinator", r.c.ls.url(), "node", "forget", n3.id}
	r.interrupted(p.name, forget)
	r.restartCoord()
	if out, err := ctl(r.t, forget...); err != nil {
		r.notRecovered("forget run again: %s", firstLine(out))
	}
	// With n3 forgotten, the others' deletes go through (once they have
	// synced with the restarted coordinator).
	r.waitMembers([]string{r.n(1).id, r.n(2).id})
	if got := r.deleteProbe(); got != "ok" {
		r.notRecovered("a delete with n3 forgotten: %s", got)
	}
	n3.startPlugin()
	n3.startContainerd(n3.config(true))
	r.waitSynced()
}

// interrupted runs sharedcontentctl args until the coordinator dies at
// point; the command, which would retry, is stopped with it (the operator's
// command was interrupted).
func (r *crashRun) interrupted(point string, args []string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan string, 1)
	go func() {
		cmd := exec.CommandContext(ctx, bins.ctl, args...)
		cmd.Env = hermeticEnv()
		out, err := cmd.CombinedOutput()
		done <- fmt.Sprintf("%v: %s", err, strings.TrimSpace(string(out)))
	}()
	r.awaitExit(r.c.ls.p, point, nil)
	cancel()
	r.t.Logf("the interrupted sharedcontentctl %s: %s", strings.Join(args[2:], " "), <-done)
}

// waitSynced waits until every node is a live, synced member; it records
// it when they are not.
func (r *crashRun) waitSynced() { r.waitMembers(nodeIDs(r.c.nodes)) }

// waitMembers waits until the members are exactly want, all live and
// synced; it records it when they are not.
func (r *crashRun) waitMembers(want []string) {
	var last string
	err := poll(syncTimeout, func() bool {
		m, err := r.c.ls.members()
		if err != nil {
			last = err.Error()
			return false
		}
		var bad []string
		for _, id := range want {
			if s, ok := m[id]; !ok || !s.Live || !s.Synced {
				bad = append(bad, fmt.Sprintf("%s(member=%v live=%v synced=%v)", id, ok, s.Live, s.Synced))
			}
		}
		for id := range m {
			if !slices.Contains(want, id) {
				bad = append(bad, id+"(a member still)")
			}
		}
		last = strings.Join(bad, " ")
		return len(bad) == 0
	})
	if err != nil {
		r.notRecovered("members not all live and synced within %v: %s", syncTimeout, last)
	}
}

// check runs the checks every point ends with: read back every blob each
// node lists; remove what the scenario pulled from every node but the
// first that holds it (the crashed side), and read everything back again:
// a reference the crash lost would have let those removals delete the
// first node's blobs; then remove it there too. A probe image pulled and
// removed by n1 must be deleted at once, and nothing is left but the base
// image.
func (r *crashRun) check() {
	r.readBack()
	for ref, nodes := range r.pulled {
		for _, n := range nodes[1:] {
			r.remove(n, ref)
		}
		if len(nodes) > 1 {
			r.readBack()
		}
		r.remove(nodes[0], ref)
	}
	r.out.deletes = r.deleteProbe()
	r.out.leaks = r.leftovers(r.base.all())
}

func (r *crashRun) remove(n *node, ref string) {
	if err := n.removeImage(ref); err != nil {
		r.notRecovered("remove %s on %s: %v", ref, n.id, err)
	}
}

// pullOn pushes a fresh image and pulls it on nodes; check removes it
// from all but the first, then reads every node's blobs back.
func (r *crashRun) pullOn(nodes ...*node) {
	img := r.push()
	for _, n := range nodes {
		require.NoError(r.t, n.pull(img.Ref, pullTimeout), "pull on %s before the crash", n.id)
	}
	r.pulled[img.Ref] = nodes
}

// readBack reads every blob every node's containerd lists and checks its
// digest.
func (r *crashRun) readBack() {
	for _, n := range r.c.nodes {
		dgsts, err := n.contentList()
		if err != nil {
			r.notRecovered("%s: content ls: %v", n.id, err)
			continue
		}
		for _, d := range dgsts {
			got, _, err := n.contentDigest(d)
			if err != nil || got != d {
				r.out.lost = append(r.out.lost, fmt.Sprintf("%s:%s(%v)", n.id, short(d), err))
				continue
			}
			r.out.reads++
		}
	}
}

// deleteProbe pulls a fresh image on n1 and removes it: its blobs must be
// gone at once (the delete rule granted every delete). The removal also
// runs n1's GC over the whole shared store, which retries what an
// interrupted GC left.
func (r *crashRun) deleteProbe() string {
	img := r.push()
	n1 := r.n(1)
	if err := n1.pull(img.Ref, pullTimeout); err != nil {
		return "probe pull: " + err.Error()
	}
	if err := n1.removeImage(img.Ref); err != nil {
		return "probe removal: " + err.Error()
	}
	if left := sharedCount(r.c.shared, img.all()); left > 0 {
		return fmt.Sprintf("%d/%d probe blobs kept (references %s)", left, len(img.all()), r.c.refsSummary(img))
	}
	return "ok"
}

// leftovers waits up to settleTimeout until the shared blobs/ holds exactly
// keep and ingest/ and .trash/ are empty, and describes what is left.
func (r *crashRun) leftovers(keep []string) string {
	want := make([]string, 0, len(keep))
	for _, d := range keep {
		want = append(want, strings.TrimPrefix(d, "sha256:"))
	}
	want = sorted(want)
	var last string
	err := poll(settleTimeout, func() bool {
		blobs, err1 := sharedFiles(r.c.shared, "blobs/sha256")
		ingests, err2 := ingestRefs(r.c.shared)
		trash, err3 := sharedFiles(r.c.shared, ".trash")
		if err := errors.Join(err1, err2, err3); err != nil {
			last = err.Error()
			return false
		}
		var extra, missing []string
		for _, b := range blobs {
			if !slices.Contains(want, b) {
				extra = append(extra, b[:12])
			}
		}
		for _, b := range want {
			if !slices.Contains(blobs, b) {
				missing = append(missing, b[:12])
			}
		}
		var parts []string
		if len(extra) > 0 {
			parts = append(parts, fmt.Sprintf("%d blobs %v", len(extra), extra))
		}
		if len(missing) > 0 {
			parts = append(parts, fmt.Sprintf("%d kept blobs missing %v", len(missing), missing))
		}
		if len(ingests) > 0 {
			parts = append(parts, fmt.Sprintf("%d ingests %v", len(ingests), slices.Sorted(maps.Keys(ingests))))
		}
		if len(trash) > 0 {
			parts = append(parts, fmt.Sprintf("%d in .trash", len(trash)))
		}
		last = strings.Join(parts, ", ")
		return len(parts) == 0
	})
	if err != nil {
		return last
	}
	return "none"
}

// finalCheck removes the base image from every node: blobs/, ingest/ and
// .trash/ must end empty.
func (r *crashRun) finalCheck() string {
	for _, n := range r.c.nodes {
		if n.containerd.exited() {
			continue
		}
		if err := n.removeImage(r.base.Ref); err != nil {
			r.t.Errorf("final removal on %s: %v", n.id, err)
		}
	}
	left := r.leftovers(nil)
	if left != "none" {
		r.t.Errorf("after every image was removed: %s", left)
		return "left " + left
	}
	return "nothing left"
}

// poll calls cond every 50 ms until it is true or timeout passes.
func poll(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func lostSummary(rows []crashOutcome) string {
	lost := 0
	for _, o := range rows {
		lost += len(o.lost)
	}
	reads := 0
	for _, o := range rows {
		reads += o.reads
	}
	return fmt.Sprintf("%d blobs read back, %d lost", reads, lost)
}

// crashTable renders the outcomes as a Markdown table.
func crashTable(rows []crashOutcome) string {
	var b strings.Builder
	b.WriteString("| failpoint | reached | recovered | blobs read back | lost | leaks | deletes | time |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, o := range rows {
		lost := "0"
		if len(o.lost) > 0 {
			lost = strings.Join(o.lost, " ")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %d | %s | %s | %s | %.1fs |\n",
			o.point, o.reached, o.recovered, o.reads, lost, o.leaks, o.deletes, o.took.Seconds())
	}
	return b.String()
}
