package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// chaosNode is a node of TestChaosReal: its own random operations, the
// images it pulled in the test's model, and whether it is up (a fault that
// kills its processes takes it down until they run again).
type chaosNode struct {
	*node
	index int        // its place in realChaos.nodes (and chaosStorage's views)
	link  chaosLink  // its link to the coordinator
	rng   *rand.Rand // its operations'
	has   map[string]bool

	mu   sync.Mutex
	upCh chan struct{} // protected by mu: closed while the node is up
}

func newChaosNode(n *node, index int, l chaosLink, rng *rand.Rand) *chaosNode {
	up := make(chan struct{})
	close(up)
	return &chaosNode{node: n, index: index, link: l, rng: rng, has: map[string]bool{}, upCh: up}
}

// chaosLink is a node's link to the coordinator: one netProxy per URL the
// node is given (one per replica on etcd). A link fault acts on all.
type chaosLink []*netProxy

func (l chaosLink) set(m proxyMode) {
	for _, p := range l {
		p.set(m)
	}
}

func (l chaosLink) setDelay(m proxyMode, d time.Duration) {
	for _, p := range l {
		p.setDelay(m, d)
	}
}

// setDown marks the node down: it starts no operation or check until
// setUp.
func (n *chaosNode) setDown() {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.upCh:
		n.upCh = make(chan struct{})
	default:
	}
}

func (n *chaosNode) setUp() {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.upCh:
	default:
		close(n.upCh)
	}
}

func (n *chaosNode) up() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.upCh
}

// waitUp waits until n is up; false when the nodes stop operating first.
func (ch *realChaos) waitUp(n *chaosNode) bool {
	select {
	case <-n.up():
		return true
	default:
	}
	select {
	case <-n.up():
		return true
	case <-ch.stop:
		return false
	}
}

// operate is one node's loop: an operation, then the invariant check on
// the node, until the nodes stop.
func (ch *realChaos) operate(n *chaosNode) {
	defer ch.wg.Done()
	for {
		select {
		case <-ch.stop:
			return
		default:
		}
		if !ch.waitUp(n) {
			return
		}
		what := ch.operation(n)
		if !ch.waitUp(n) {
			return
		}
		ch.check(n, fmt.Sprintf("after %s's %s", n.id, what))
	}
}

// operation pulls a random image, or removes one the node pulled (and runs
// containerd's GC: `images rm --sync`). The model follows the choices, not
// the outcomes, so a seed replays the same sequence.
func (ch *realChaos) operation(n *chaosNode) string {
	held := slices.Sorted(maps.Keys(n.has))
	if len(held) > 0 && n.rng.Float64() < 0.4 {
		ref := held[n.rng.IntN(len(held))]
		delete(n.has, ref)
		err := n.removeImage(ref)
		switch {
		case err == nil:
			ch.count("rm")
		case strings.Contains(err.Error(), "not found"):
			ch.count("rm (not found)")
		default:
			ch.count("rm failed")
			ch.t.Logf("chaos: %s rm %s: %v", n.id, imageName(ref), err)
		}
		return "rm " + imageName(ref)
	}
	img := ch.imgs[n.rng.IntN(len(ch.imgs))]
	n.has[img.Ref] = true // a failed pull may have recorded the image
	if err := n.pull(img.Ref, chaosPullTimeout); err != nil {
		ch.count("pull failed")
		ch.t.Logf("chaos: %s pull %s: %v", n.id, imageName(img.Ref), err)
	} else {
		ch.count("pull")
	}
	return "pull " + imageName(img.Ref)
}

// imageName is the repository of ref, for logs.
func imageName(ref string) string {
	s := ref[strings.LastIndexByte(ref, '/')+1:]
	return strings.TrimSuffix(s, ":v1")
}

// check reads back every blob n's containerd lists.
func (ch *realChaos) check(n *chaosNode, when string) {
	list, err := n.contentList()
	if err != nil {
		ch.count("check skipped (node unreachable)")
		return
	}
	ch.count("check")
	for _, d := range list {
		ch.readBack(n, d, when)
	}
}

// readBack reads d through n's containerd. A failed read is a loss only
// when the blob is gone from (or corrupt in) the shared dir while n's
// containerd still lists it, and a second read fails too: containerd
// drops a blob from its metadata before it deletes it from the store, so a
// blob n's own GC collected meanwhile is no longer listed.
func (ch *realChaos) readBack(n *chaosNode, d, when string) {
	got, _, err := n.contentDigest(d)
	if err == nil && got == d {
		ch.mu.Lock()
		ch.reads++
		ch.mu.Unlock()
		return
	}
	if err == nil {
		err = fmt.Errorf("read %s", got)
	}
	state := ch.sharedState(d)
	if state == "intact" || !ch.waitUp(n) {
		ch.readError(n, d, err)
		return
	}
	list, lerr := n.contentList()
	if lerr != nil || !slices.Contains(list, d) {
		ch.readError(n, d, err)
		return
	}
	if again, _, err2 := n.contentDigest(d); err2 == nil && again == d {
		ch.readError(n, d, err)
		return
	}
	ch.lose(n, d, when, state, err)
}

func (ch *realChaos) readError(n *chaosNode, d string, err error) {
	ch.mu.Lock()
	ch.readErrors++
	ch.mu.Unlock()
	ch.t.Logf("chaos: %s: read of %s failed, not lost: %v", n.id, short(d), err)
}

// sharedState is sharedBlobState of d in the shared root. While the
// shared filesystem itself does not answer (every GlusterFS brick killed:
// the checks' own mount fails too), it waits up to chaosSyncTimeout for
// an answer; one still unreadable after that (a GlusterFS split brain
// answers EIO) counts as lost as a missing one does.
func (ch *realChaos) sharedState(d string) string {
	deadline := time.Now().Add(chaosSyncTimeout)
	for {
		state := sharedBlobState(ch.c.shared, d)
		if !strings.HasPrefix(state, "unreachable") || time.Now().After(deadline) {
			return state
		}
		time.Sleep(time.Second)
	}
}

// sharedBlobState says whether d is intact, missing or corrupt in the
// shared blobs/, or "unreachable (…)" when the filesystem fails otherwise
// (ENOTCONN from a GlusterFS mount whose bricks are all down).
func sharedBlobState(shared, d string) string {
	f, err := os.Open(filepath.Join(shared, "blobs", "sha256", strings.TrimPrefix(d, "sha256:")))
	if errors.Is(err, fs.ErrNotExist) {
		return "missing"
	}
	if err != nil {
		return fmt.Sprintf("unreachable (%v)", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Sprintf("unreachable (read: %v)", err)
	}
	if "sha256:"+hex.EncodeToString(h.Sum(nil)) != d {
		return "corrupt"
	}
	return "intact"
}

// lose records a lost blob once per node, with the faults of the last
// chaosRecent to blame, and what the daemons' logs say about it.
func (ch *realChaos) lose(n *chaosNode, d, when, state string, err error) {
	now := time.Now()
	ch.mu.Lock()
	key := n.id + " " + d
	if ch.lostSeen[key] {
		ch.mu.Unlock()
		return
	}
	ch.lostSeen[key] = true
	var recent []string
	kinds := map[string]bool{}
	for _, f := range ch.history {
		if f.end.IsZero() || now.Sub(f.end) < chaosRecent {
			recent = append(recent, f.String())
			kinds[f.kind] = true
		}
	}
	if len(kinds) == 0 {
		kinds["none"] = true
	}
	for k := range kinds {
		ch.blame[k]++
	}
	line := fmt.Sprintf("%s: %s's containerd lists %s (%s) but it is %s in the shared dir (read: %v) at %s; faults in the last %v: %s",
		when, n.id, short(d), ch.imagesOf(d), state, err, now.Format("15:04:05.0"), chaosRecent, orNone(recent))
	ch.lost = append(ch.lost, line)
	ch.mu.Unlock()
	ch.t.Logf("chaos seed %d: LOST %s", ch.seed, line)
	ch.t.Logf("chaos: %s in the daemons' logs:\n%s", short(d), ch.grepLogs(d))
}

// imagesOf names the images d belongs to.
func (ch *realChaos) imagesOf(d string) string {
	var out []string
	for _, img := range ch.imgs {
		if slices.Contains(img.all(), d) {
			out = append(out, imageName(img.Ref))
		}
	}
	return strings.Join(out, ",")
}

// grepLogs returns the last lines of the coordinator's and the plugins'
// logs that mention d, but for unpacks.
func (ch *realChaos) grepLogs(d string) string {
	// The paths, not the procs: a fault may be restarting a daemon.
	logs := ch.coordinatorLogs()
	for _, n := range ch.nodes {
		logs = append(logs, filepath.Join(n.dir, "plugin.log"))
	}
	var b strings.Builder
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			continue
		}
		var hits []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			// Unpacks are noise here.
			if line := sc.Text(); strings.Contains(line, d) && !strings.Contains(line, "diff") {
				if len(line) > 400 {
					line = line[:400] + "…"
				}
				hits = append(hits, line)
			}
		}
		f.Close()
		if len(hits) > 12 {
			hits = hits[len(hits)-12:]
		}
		fmt.Fprintf(&b, "  --- %s\n", filepath.Base(filepath.Dir(l))+"/"+filepath.Base(l))
		for _, h := range hits {
			b.WriteString("  " + h + "\n")
		}
	}
	return b.String()
}

// uncoordinated counts, from the plugins' logs, the operations that went
// ahead (write, ref) or were held back (delete) without the coordinator
// (docs/design.md §8.8: "coordinator unreachable"), by operation.
func (ch *realChaos) uncoordinated() map[string]int {
	out := map[string]int{}
	for _, n := range ch.nodes {
		f, err := os.Open(filepath.Join(n.dir, "plugin.log"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, `msg="coordinator unreachable"`) {
				continue
			}
			op := "?"
			if i := strings.Index(line, " op="); i >= 0 {
				op, _, _ = strings.Cut(line[i+len(" op="):], " ")
			}
			out[op]++
		}
		f.Close()
	}
	return out
}
