package contentv2

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
// Refs calls fn in resource ID order (a plan fails otherwise).
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
	// memory for the grace. A reaper drops none of them: each node drops
	// its own, seen missing in its own view (docs/design.md §8.12).
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
	// marker is the fingerprint of the marker's state as last observed,
	// reported to the coordinator; "" when missing.
	marker string
}

// PlanReap decides what a reaper pass would remove now from the shared
// root, given the coordinator's references and members and what mem has
// observed; it updates mem's observations and removes nothing. It holds
// the root's blob listing and the references to blobs not in it, never
// every reference: the references arrive a page at a time in resource ID
// order, merged with the sorted listing (docs/design.md §10.3).
func PlanReap(ctx context.Context, root string, src ReapSource, opts ReapOptions, mem *ReapMemory) (ReapPlan, error) {
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if mem.dangling == nil {
		mem.dangling, mem.markers = map[string]time.Time{}, map[string]markerSeen{}
	}
	plan := ReapPlan{Grace: opts.Grace, Orphans: []ReapBlob{}, Dangling: []ReapRef{}, Ingests: []ReapFile{},
		Markers: []ReapFile{}, Trash: []ReapFile{}, Expire: []ReapMember{}, Absent: []ReapMember{}}
	if err := mem.planBlobs(ctx, root, src, &plan); err != nil {
		return plan, err
	}
	ms, err := src.Members(ctx)
	if err != nil {
		return plan, fmt.Errorf("reaper: listing members: %w", err)
	}
	plan.NodeExpiry = ms.NodeExpiry
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

// listedBlob is a file of the root's blob directories whose name is a
// valid digest.
type listedBlob struct {
	digest digest.Digest
	entry  fs.DirEntry
}

// listBlobFiles lists the root's blob files, sorted by digest (the order
// of the coordinator's resource IDs).
func listBlobFiles(root string) ([]listedBlob, error) {
	algs, err := os.ReadDir(filepath.Join(root, "blobs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reaper: walking blobs: %w", err)
	}
	var out []listedBlob
	for _, alg := range algs {
		files, _ := os.ReadDir(filepath.Join(root, "blobs", alg.Name()))
		for _, f := range files {
			d := digest.NewDigestFromEncoded(digest.Algorithm(alg.Name()), f.Name())
			if d.Validate() == nil {
				out = append(out, listedBlob{digest: d, entry: f})
			}
		}
	}
	slices.SortFunc(out, func(a, b listedBlob) int { return strings.Compare(string(a.digest), string(b.digest)) })
	return out, nil
}

// planBlobs lists the blobs nobody references, older than the grace, and
// the references to blobs this memory has seen missing for the grace: one
// walk of the references, merged with the blob listing taken before it.
// A blob is referenced when its set names a node. A reference whose blob
// is not in the listing is missing unless the blob turns up after the
// walk (stillMissing).
func (m *ReapMemory) planBlobs(ctx context.Context, root string, src ReapSource, plan *ReapPlan) error {
	blobs, err := listBlobFiles(root)
	if err != nil {
		return err
	}
	now := time.Now()
	orphan := func(b listedBlob) {
		fi, err := b.entry.Info()
		if err != nil || !fi.Mode().IsRegular() {
			return
		}
		plan.ReclaimableBytes += fi.Size()
		if age := now.Sub(fi.ModTime()); age >= plan.Grace {
			plan.Orphans = append(plan.Orphans, ReapBlob{Digest: b.digest, Size: fi.Size(), Age: age})
		} else {
			plan.WaitingOrphans++
		}
	}
	var (
		missing []ReapRef // references to blobs not in the listing
		next    int       // the first blob not merged yet
		last    *string   // the previous resource
	)
	err = src.Refs(ctx, func(resource string, nodes []string) error {
		if last != nil && resource <= *last {
			return fmt.Errorf("reference %q after %q: not in resource ID order", resource, *last)
		}
		last = &resource
		for ; next < len(blobs) && string(blobs[next].digest) < resource; next++ {
			orphan(blobs[next])
		}
		if next < len(blobs) && string(blobs[next].digest) == resource {
			if len(nodes) == 0 {
				orphan(blobs[next])
			}
			next++
			return nil
		}
		if d, err := digest.Parse(resource); err == nil {
			missing = append(missing, ReapRef{Resource: resource, Nodes: nodes, blobMissing: d})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reaper: listing references: %w", err)
	}
	for ; next < len(blobs); next++ {
		orphan(blobs[next])
	}
	gone, err := stillMissing(root, missing, len(blobs))
	if err != nil {
		return err
	}
	// The memory keeps exactly the references seen missing now, each
	// since it was first seen so.
	dangling := make(map[string]time.Time, len(missing))
	for _, r := range missing {
		if !gone(r.blobMissing) {
			continue
		}
		first, ok := m.dangling[r.Resource]
		if !ok {
			first = now
		}
		dangling[r.Resource] = first
		if r.MissingFor = now.Sub(first); r.MissingFor >= plan.Grace {
			plan.Dangling = append(plan.Dangling, r)
		} else {
			plan.WaitingDangling++
		}
	}
	m.dangling = dangling
	return nil
}

// stillMissing returns whether a blob of missing (references to blobs not
// in a listing of listed blobs, taken before they were seen) is still
// missing: a stat of each, or, when there are more of them than blobs, a
// new listing.
func stillMissing(root string, missing []ReapRef, listed int) (func(digest.Digest) bool, error) {
	if len(missing) <= listed {
		return func(d digest.Digest) bool {
			_, err := os.Stat(blobPathIn(root, d))
			return errors.Is(err, fs.ErrNotExist)
		}, nil
	}
	blobs, err := listBlobFiles(root)
	if err != nil {
		return nil, err
	}
	present := make(map[digest.Digest]bool, len(blobs))
	for _, b := range blobs {
		present[b.digest] = true
	}
	return func(d digest.Digest) bool { return !present[d] }, nil
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
		rm := ReapMember{Node: n.ID, Absent: n.Absent, MarkerUnchanged: unchanged, marker: m.markerReport(n.ID).State}
		// A missing marker is evidence of nothing (an empty view sees
		// every marker missing): never expired on it.
		if ms.NodeExpiry > 0 && n.Absent >= ms.NodeExpiry && unchanged >= ms.NodeExpiry && rm.marker != "" {
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
