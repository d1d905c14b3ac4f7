package contentv2

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
)

// The reaper's decision (docs/design.md §8.12), apart from its acts so that
// `sharedcontentctl reap --dry-run` runs exactly this code and lists what
// a pass would remove. A pass (reaper.go) plans, then acts on the plan
// under the delete rule; the coordinator may still refuse each delete or
// expiry, and a plan is never a promise that anything goes.

// ReapSource is what the reaper's decision reads from the coordinator.
type ReapSource interface {
	Refs(ctx context.Context, fn func(resource string, nodes []string) error) error
	Members(ctx context.Context) (Membership, error)
}

// ReapOptions are a plan's parameters.
type ReapOptions struct {
	// Grace: orphans, leftovers and dangling references are reclaimed
	// only once this old (--reap-grace).
	Grace time.Duration
	// Self is the reaping node, whose ingests and marker are never
	// leftovers ("" for a dry run, which runs on no node).
	Self string
}

// ReapMemory is what a reaper has observed across passes, on its own
// monotonic clock: since when each reference has been seen dangling and
// each node marker unchanged. The zero value is an empty memory. A new
// memory (a reaper restarted, the reap lock taken by another node, a dry
// run) restarts every observation: that only delays reclaiming and expiry,
// never hastens them.
type ReapMemory struct {
	mu       sync.Mutex            // held for a whole plan
	dangling map[string]time.Time  // protected by mu; resource → first seen missing
	markers  map[string]markerSeen // protected by mu; node → its marker's state
}

// ReapPlan is what one reaper pass would remove now, and why.
type ReapPlan struct {
	Grace      time.Duration `json:"grace_ns"`
	NodeExpiry time.Duration `json:"node_expiry_ns"`
	// Orphans are blobs nobody references, older than the grace.
	Orphans []ReapBlob `json:"orphans"`
	// Dangling are references to blobs that do not exist, seen so by this
	// memory for the grace.
	Dangling []ReapRef `json:"dangling"`
	// Ingests and Markers are those of nodes that are no longer members,
	// and Trash the leftovers of deletes, all older than the grace.
	Ingests []ReapFile `json:"ingests"`
	Markers []ReapFile `json:"markers"`
	Trash   []ReapFile `json:"trash"`
	// Expire are the members gone by both measures (docs/design.md
	// §8.4): unheard of by the coordinator, and their marker
	// unchanged, for the node expiry.
	Expire []ReapMember `json:"expire"`
	// Absent are the other members that are not live, with both measures
	// so far.
	Absent []ReapMember `json:"absent"`
	// ReclaimableBytes counts every unreferenced blob, also those still
	// within the grace.
	ReclaimableBytes int64 `json:"reclaimable_bytes"`
	// Waiting counts what is not yet old enough: unreferenced blobs and
	// dangling references within the grace.
	WaitingOrphans  int `json:"waiting_orphans"`
	WaitingDangling int `json:"waiting_dangling"`
}

// ReapBlob is a blob file of the shared root.
type ReapBlob struct {
	Digest digest.Digest `json:"digest"`
	Size   int64         `json:"size"`
	Age    time.Duration `json:"age_ns"`
}

// ReapRef is a reference to a missing blob.
type ReapRef struct {
	Resource    string        `json:"resource"`
	Nodes       []string      `json:"nodes"`
	MissingFor  time.Duration `json:"missing_for_ns"`
	blobMissing digest.Digest // the parsed resource
}

// ReapFile is a leftover: Path is relative to the root.
type ReapFile struct {
	Path  string        `json:"path"`
	Node  string        `json:"node,omitempty"`
	Bytes int64         `json:"bytes"`
	Age   time.Duration `json:"age_ns"`
}

// ReapMember is a member that is not live.
type ReapMember struct {
	Node string `json:"node"`
	// Absent is the coordinator's measure, in its own uptime.
	Absent time.Duration `json:"absent_ns"`
	// MarkerUnchanged is this memory's measure.
	MarkerUnchanged time.Duration `json:"marker_unchanged_ns"`
}

// PlanReap decides what a reaper pass would remove now from the shared
// root, given the coordinator's references and members and what mem has
// observed; it updates mem's observations and removes nothing.
func PlanReap(ctx context.Context, root string, src ReapSource, opts ReapOptions, mem *ReapMemory) (ReapPlan, error) {
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if mem.dangling == nil {
		mem.dangling, mem.markers = map[string]time.Time{}, map[string]markerSeen{}
	}
	plan := ReapPlan{Grace: opts.Grace, Orphans: []ReapBlob{}, Dangling: []ReapRef{}, Ingests: []ReapFile{},
		Markers: []ReapFile{}, Trash: []ReapFile{}, Expire: []ReapMember{}, Absent: []ReapMember{}}
	refs := map[string][]string{}
	err := src.Refs(ctx, func(resource string, nodes []string) error {
		refs[resource] = nodes
		return nil
	})
	if err != nil {
		return plan, fmt.Errorf("reaper: listing references: %w", err)
	}
	ms, err := src.Members(ctx)
	if err != nil {
		return plan, fmt.Errorf("reaper: listing members: %w", err)
	}
	plan.NodeExpiry = ms.NodeExpiry
	if err := planOrphans(root, refs, &plan); err != nil {
		return plan, err
	}
	mem.planDangling(root, refs, &plan)
	member := map[string]bool{}
	for _, m := range ms.Nodes {
		member[m.ID] = true
	}
	if opts.Self != "" {
		member[opts.Self] = true
	}
	planLeftovers(root, member, &plan)
	mem.planExpiry(root, ms, &plan)
	return plan, nil
}

// planOrphans lists the blobs nobody references, older than the grace.
func planOrphans(root string, refs map[string][]string, plan *ReapPlan) error {
	algs, err := os.ReadDir(filepath.Join(root, "blobs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reaper: walking blobs: %w", err)
	}
	now := time.Now()
	for _, alg := range algs {
		files, _ := os.ReadDir(filepath.Join(root, "blobs", alg.Name()))
		for _, f := range files {
			d := digest.NewDigestFromEncoded(digest.Algorithm(alg.Name()), f.Name())
			fi, err := f.Info()
			if d.Validate() != nil || err != nil || !fi.Mode().IsRegular() || len(refs[d.String()]) > 0 {
				continue
			}
			plan.ReclaimableBytes += fi.Size()
			if age := now.Sub(fi.ModTime()); age >= plan.Grace {
				plan.Orphans = append(plan.Orphans, ReapBlob{Digest: d, Size: fi.Size(), Age: age})
			} else {
				plan.WaitingOrphans++
			}
		}
	}
	return nil
}

// planDangling lists the references to blobs this memory has seen missing
// for the grace.
func (m *ReapMemory) planDangling(root string, refs map[string][]string, plan *ReapPlan) {
	now := time.Now()
	for id := range m.dangling {
		if _, ok := refs[id]; !ok {
			delete(m.dangling, id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(refs)) {
		d, err := digest.Parse(id)
		if err != nil {
			continue
		}
		if _, err := os.Stat(blobPathIn(root, d)); !errors.Is(err, fs.ErrNotExist) {
			delete(m.dangling, id)
			continue
		}
		first, ok := m.dangling[id]
		if !ok {
			m.dangling[id], first = now, now
		}
		if missing := now.Sub(first); missing >= plan.Grace {
			plan.Dangling = append(plan.Dangling, ReapRef{Resource: id, Nodes: refs[id], MissingFor: missing, blobMissing: d})
		} else {
			plan.WaitingDangling++
		}
	}
}

// planLeftovers lists the ingests and markers of nodes that are not
// members, and the trash, older than the grace.
func planLeftovers(root string, member map[string]bool, plan *ReapPlan) {
	now := time.Now()
	old := func(fi fs.FileInfo) (time.Duration, bool) {
		age := now.Sub(fi.ModTime())
		return age, age >= plan.Grace
	}
	ingests, _ := os.ReadDir(filepath.Join(root, "ingest"))
	for _, e := range ingests {
		dir := filepath.Join(root, "ingest", e.Name())
		ref, err := os.ReadFile(filepath.Join(dir, "ref"))
		node, _, ok := strings.Cut(string(ref), "/")
		fi, serr := os.Stat(dir)
		if err != nil || !ok || member[node] || serr != nil {
			continue
		}
		if age, ok := old(fi); ok {
			plan.Ingests = append(plan.Ingests, ReapFile{Path: filepath.Join("ingest", e.Name()), Node: node, Bytes: dirBytes(dir), Age: age})
		}
	}
	markers, _ := NodeMarkers(root)
	for _, node := range markers {
		fi, err := os.Stat(filepath.Join(nodesDir(root), node))
		if err != nil || member[node] {
			continue
		}
		if age, ok := old(fi); ok {
			plan.Markers = append(plan.Markers, ReapFile{Path: filepath.Join(MetaDir, "nodes", node), Node: node, Bytes: fi.Size(), Age: age})
		}
	}
	trash, _ := os.ReadDir(filepath.Join(root, TrashDir))
	for _, e := range trash {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if age, ok := old(fi); ok {
			plan.Trash = append(plan.Trash, ReapFile{Path: filepath.Join(TrashDir, e.Name()), Bytes: dirBytes(filepath.Join(root, TrashDir, e.Name())), Age: age})
		}
	}
}

// planExpiry observes every member's marker and lists the members gone by
// both measures.
func (m *ReapMemory) planExpiry(root string, ms Membership, plan *ReapPlan) {
	now := time.Now()
	current := map[string]bool{}
	for _, n := range ms.Nodes {
		current[n.ID] = true
		unchanged := m.observeMarker(root, n.ID, now)
		if n.Live {
			continue
		}
		rm := ReapMember{Node: n.ID, Absent: n.Absent, MarkerUnchanged: unchanged}
		if ms.NodeExpiry > 0 && n.Absent >= ms.NodeExpiry && unchanged >= ms.NodeExpiry {
			plan.Expire = append(plan.Expire, rm)
		} else {
			plan.Absent = append(plan.Absent, rm)
		}
	}
	for node := range m.markers {
		if !current[node] {
			delete(m.markers, node)
		}
	}
	slices.SortFunc(plan.Expire, func(a, b ReapMember) int { return strings.Compare(a.Node, b.Node) })
	slices.SortFunc(plan.Absent, func(a, b ReapMember) int { return strings.Compare(a.Node, b.Node) })
}

// dirBytes is the size of a file, or of the files under a directory.
func dirBytes(path string) int64 {
	var n int64
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func blobPathIn(root string, d digest.Digest) string {
	return filepath.Join(root, "blobs", d.Algorithm().String(), d.Encoded())
}
