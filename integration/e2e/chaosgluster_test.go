package e2e

import (
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The chaos test on GlusterFS (SHAREDCONTENT_E2E_CHAOS_FS=glusterfs, `make
// chaos CHAOS_FS=glusterfs`): every node's --root is its own FUSE mount of
// one replica-3 volume, and the faults add killing brick processes.

// envChaosFS selects the chaos test's shared filesystem: empty, a
// directory of the test's disk (bind-mounted per node when storage faults
// are chosen); "glusterfs", a GlusterFS volume mounted per node.
const envChaosFS = "SHAREDCONTENT_E2E_CHAOS_FS"

// chaosGlusterFaults are the fault kinds that need the GlusterFS setup.
var chaosGlusterFaults = []string{
	"brick-kill",     // one brick process (glusterfsd) killed (SIGKILL); `gluster volume start VOL force` 3–20 s later
	"brick-kill-all", // every brick process killed: every node's root fails at once; started again 3–20 s later
}

const (
	// chaosBricks is the volume's replica count: with one brick down the
	// other two still make a quorum (cluster.quorum-type auto) and serve
	// reads and writes; the returning brick is healed from them.
	chaosBricks = 3
	// glusterBrickTimeout bounds a killed brick's coming back: glusterd
	// seeing it gone, `volume start force`, the brick online.
	glusterBrickTimeout = time.Minute
)

// glusterReplicaOptions are set on the chaos volume besides
// glusterVolumeOptions. Without a favorite-child policy AFR leaves a gfid
// split brain (the same name with another GFID on two bricks, each
// blaming the other) for an operator to resolve, and answers EIO on that
// name meanwhile. The chaos's full filesystem made one of a node's marker
// (.sharedcontent/nodes/<id>, replaced by a rename every session
// interval), and that node's daemon could not start (docs/e2e.md). With
// "mtime" AFR keeps the newer copy by itself: right for the marker, and
// for a blob any copy is the same bytes.
var glusterReplicaOptions = [][2]string{{"cluster.favorite-child-policy", "mtime"}}

// chaosFS parses SHAREDCONTENT_E2E_CHAOS_FS: whether the nodes' roots are
// GlusterFS mounts.
func chaosFS(s string) (glusterfs bool, err error) {
	switch strings.TrimSpace(s) {
	case "", "local":
		return false, nil
	case "glusterfs":
		return true, nil
	}
	return false, fmt.Errorf("%s=%q: local (the default) or glusterfs", envChaosFS, s)
}

// chaosGluster is the GlusterFS volume under the chaos test's nodes:
//
//	disk/               a tmpfs holding the bricks ("fill" only; else they are on the test's disk)
//	disk/b1 b2 b3       the bricks of the replica-3 volume
//	disk/fill           the file that fills the bricks' filesystem
//	g0                  the checks' own mount (never faulted): realChaos.c.shared
//	v1 v2 v3            node i's mount: its --root (chaosStorage.views)
type chaosGluster struct {
	vol *glusterVolume
}

// newChaosGluster builds the volume and the mounts of three nodes into s.
func newChaosGluster(t *testing.T, e *env, kinds []string, s *chaosStorage) {
	t.Helper()
	needGlusterFS(t)
	ensureGlusterd(e)
	base := e.path()
	if slices.Contains(kinds, "fill") {
		// Every brick holds a whole copy.
		s.disk = e.path("disk")
		mustNoErr(t, os.MkdirAll(s.disk, 0o755))
		mustNoErr(t, syscall.Mount("tmpfs", s.disk, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", chaosBricks*chaosDiskSize)))
		base = s.disk
	}
	var paths []string
	for i := range chaosBricks {
		paths = append(paths, filepath.Join(base, fmt.Sprintf("b%d", i+1)))
	}
	g := &chaosGluster{vol: newGlusterVolume(e, paths)}
	s.gluster = g
	for _, kv := range glusterReplicaOptions {
		if _, err := glusterCLI("volume", "set", g.vol.name, kv[0], kv[1]); err != nil {
			t.Fatalf("e2e: %v", err)
		}
	}
	s.shared = e.path("g0")
	g.vol.mount(s.shared)
	for i := range 3 {
		view := e.path(fmt.Sprintf("v%d", i+1))
		g.vol.mount(view)
		s.views = append(s.views, view)
	}
	requireCrossVisible(t, g.vol.mounts)
	requireNoStaleEntry(t, g.vol.mounts)
	t.Logf("chaos: glusterfs volume %s, replica %d (%s), mounted at %s", g.vol.name, chaosBricks,
		strings.Join(g.vol.bricks, " "), strings.Join(g.vol.mounts, ", "))
	// Every client and brick runs again before anything stops: a stopped
	// client would hang the nodes' stop and the unmounts. The volume's
	// cleanup (newGlusterVolume) then runs after the nodes have stopped.
	t.Cleanup(func() {
		g.thawAll(s)
		e.stopAll()
	})
}

// remount mounts the volume again at node i's view after an unmount.
func (g *chaosGluster) remount(s *chaosStorage, i int) error {
	return g.vol.tryMount(s.views[i])
}

// freeze stops node i's FUSE client (SIGSTOP): every call on its root
// blocks, as on a hung server; thaw continues it.
func (g *chaosGluster) freeze(s *chaosStorage, i int) (int, error) {
	pid, err := fuseClientPID(s.views[i])
	if err != nil {
		return 0, err
	}
	return pid, syscall.Kill(pid, syscall.SIGSTOP)
}

// thawAll continues every FUSE client of the volume, in case the test
// stopped during a freeze.
func (g *chaosGluster) thawAll(s *chaosStorage) {
	for _, mp := range s.views {
		if pid, err := fuseClientPID(mp); err == nil {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// fuseClientPID finds the glusterfs FUSE client serving mount point mp:
// the latest started process whose command line ends in mp (a client of a
// lazily unmounted mount there lives on until its last user goes).
func fuseClientPID(mp string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	best, bestStart := 0, uint64(0)
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 2 || filepath.Base(args[0]) != "glusterfs" || args[len(args)-1] != mp || !slices.Contains(args, "fuse") {
			continue
		}
		if start := procStartTime(pid); best == 0 || start > bestStart {
			best, bestStart = pid, start
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("no glusterfs client process for %s", mp)
	}
	return best, nil
}

// procStartTime is a process's start time in clock ticks since boot
// (field 22 of /proc/PID/stat), 0 if unknown.
func procStartTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count after it.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(fields[19], 10, 64)
	return v
}

// brickStatus is one brick of `gluster volume status VOL --xml`.
type brickStatus struct {
	Path   string `xml:"path"`
	Status int    `xml:"status"` // 1: online
	PID    int    `xml:"pid"`
}

// bricks returns the status of the volume's bricks by directory.
func (g *chaosGluster) bricks() (map[string]brickStatus, error) {
	out, err := glusterCLI("volume", "status", g.vol.name, "--xml")
	if err != nil {
		return nil, err
	}
	var doc struct {
		Nodes []brickStatus `xml:"volStatus>volumes>volume>node"`
	}
	if err := xml.Unmarshal([]byte(out), &doc); err != nil {
		return nil, fmt.Errorf("gluster volume status %s --xml: %v", g.vol.name, err)
	}
	m := map[string]brickStatus{}
	for _, n := range doc.Nodes {
		if slices.Contains(g.vol.paths, n.Path) {
			m[n.Path] = n
		}
	}
	return m, nil
}

// killBricks kills the brick processes of paths (SIGKILL) and waits until
// glusterd sees them offline (a `volume start force` before that starts
// nothing). It returns the killed PIDs.
func (g *chaosGluster) killBricks(paths []string) ([]int, error) {
	st, err := g.bricks()
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, p := range paths {
		b, ok := st[p]
		if !ok || b.Status != 1 || b.PID <= 0 {
			return pids, fmt.Errorf("brick %s is not online before its kill (%+v)", p, b)
		}
		if err := syscall.Kill(b.PID, syscall.SIGKILL); err != nil {
			return pids, fmt.Errorf("kill -9 brick %s (pid %d): %v", p, b.PID, err)
		}
		pids = append(pids, b.PID)
	}
	return pids, g.waitBricks("offline", func(st map[string]brickStatus) bool {
		for _, p := range paths {
			if st[p].Status == 1 {
				return false
			}
		}
		return true
	})
}

// startBricks is the operator's `gluster volume start VOL force`, repeated
// until every brick is online.
func (g *chaosGluster) startBricks() error {
	var lastStart time.Time
	return g.waitBricks("online", func(st map[string]brickStatus) bool {
		online := 0
		for _, p := range g.vol.paths {
			if st[p].Status == 1 && st[p].PID > 0 {
				online++
			}
		}
		if online == len(g.vol.paths) {
			return true
		}
		if time.Since(lastStart) > 5*time.Second {
			lastStart = time.Now()
			_, _ = glusterCLI("volume", "start", g.vol.name, "force")
		}
		return false
	})
}

// waitBricks polls the bricks' status until ok, for at most
// glusterBrickTimeout.
func (g *chaosGluster) waitBricks(what string, ok func(map[string]brickStatus) bool) error {
	deadline := time.Now().Add(glusterBrickTimeout)
	for {
		st, err := g.bricks()
		if err == nil && ok(st) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("volume %s's bricks not %s within %v (status %+v, %v)", g.vol.name, what, glusterBrickTimeout, st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// healEntries matches the counts of `gluster volume heal VOL info`.
var healEntries = regexp.MustCompile(`Number of entries: (\S+)`)

// pendingHeals is the number of entries the volume's bricks still have
// to heal (`gluster volume heal VOL info`); an error when a brick cannot
// tell (it is down).
func (g *chaosGluster) pendingHeals() (int, error) {
	out, err := glusterCLI("volume", "heal", g.vol.name, "info")
	if err != nil {
		return 0, err
	}
	total := 0
	ms := healEntries.FindAllStringSubmatch(out, -1)
	if len(ms) != len(g.vol.paths) {
		return 0, fmt.Errorf("gluster volume heal %s info: %d bricks answered: %s", g.vol.name, len(ms), strings.TrimSpace(out))
	}
	for _, m := range ms {
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return 0, fmt.Errorf("gluster volume heal %s info: a brick's entries are %q", g.vol.name, m[1])
		}
		total += n
	}
	return total, nil
}

// brickFault kills one brick (p.n's index picks it) or every brick, for
// p.hold, then starts them again.
func (ch *realChaos) brickFault(kind string, p faultPlan) {
	g := ch.storage.gluster
	paths := g.vol.paths
	if kind == "brick-kill" {
		paths = paths[p.n.index : p.n.index+1]
	}
	pids, err := g.killBricks(paths)
	ch.must(err, "%s", kind)
	ch.t.Logf("chaos: killed brick processes %v (%s)", pids, strings.Join(paths, " "))
	time.Sleep(p.hold)
	start := time.Now()
	ch.must(g.startBricks(), "gluster volume start %s force", g.vol.name)
	ch.t.Logf("chaos: every brick online %.1fs after `gluster volume start %s force`", time.Since(start).Seconds(), g.vol.name)
}

// healVolume waits, after the last fault, until every brick is online and
// nothing is left to heal.
func (ch *realChaos) healVolume() {
	g := ch.storage.gluster
	start := time.Now()
	if err := g.startBricks(); err != nil {
		ch.healError("after the last fault: %v", err)
		return
	}
	var n int
	var err error
	for {
		if n, err = g.pendingHeals(); err == nil && n == 0 {
			ch.t.Logf("chaos: volume %s healed %.1fs after the last fault", g.vol.name, time.Since(start).Seconds())
			return
		}
		if time.Since(start) > chaosSyncTimeout {
			break
		}
		time.Sleep(time.Second)
	}
	ch.healError("volume %s not healed %v after the last fault: %d entries to heal (%v)", g.vol.name, chaosSyncTimeout, n, err)
}

// targetBrick names the brick a brick-kill fault on p acts on.
func (ch *realChaos) targetBrick(kind string, p faultPlan) string {
	if kind == "brick-kill-all" {
		return "every brick"
	}
	return "brick " + filepath.Base(ch.storage.gluster.vol.paths[p.n.index])
}
