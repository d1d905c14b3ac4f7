package contentv2

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The reaper (SPEC §8). containerd offers a blob for deletion only when its
// own metadata changed, so a blob kept for another node may never be
// offered again once that node lets go of it, and a forgotten node's blobs
// are nobody's. One node at a time, holding the reap lock, walks the
// shared directory and reclaims, under the delete rule:
//   - blobs nobody references, older than the grace (ReapOrphan);
//   - references to blobs that do not exist, seen so for the grace
//     (ReapDangling);
//   - ingests and node markers of nodes that are no longer members, and
//     leftovers in .trash, older than the grace.
//
// A blob being pulled is safe: its pull lock excludes the delete lock. A
// blob used by a node cut off from the coordinator is safe: that node is
// unsynced, and the delete rule refuses every delete until it syncs. The
// coordinator checks too: it grants a reap delete only to the node that
// holds the reap lock (api.ReapLockResource), and only outside its own
// reap grace of the resource's last pull or reference change.

// ReapReport is what one reaper pass did.
type ReapReport struct {
	// Ran is false when another node's reaper held the lock.
	Ran bool
	// Orphans and OrphanBytes count the unreferenced blobs removed;
	// ReclaimableBytes counts every unreferenced blob found, also those
	// still within the grace or kept by the delete rule.
	Orphans, OrphanBytes, ReclaimableBytes int64
	// Dangling counts references to missing blobs dropped.
	Dangling int
	// Ingests, Markers and Trash count leftovers removed.
	Ingests, Markers, Trash int
}

// reaperState is what the reaper remembers between passes.
type reaperState struct {
	mu sync.Mutex
	// dangling maps a referenced resource whose blob was missing to when
	// that was first seen. Protected by mu, held for a whole pass.
	dangling map[string]time.Time
}

func (s *store) reapLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.reapInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.reapInterval)
		rep, err := s.Reap(ctx)
		cancel()
		l := log.L.WithField("node", s.nodeID)
		if err != nil {
			l.WithError(err).Warn("reaper pass failed")
		} else if rep.Ran {
			l.WithField("orphans", rep.Orphans).WithField("bytes", rep.OrphanBytes).WithField("dangling", rep.Dangling).
				WithField("ingests", rep.Ingests).WithField("reclaimable_bytes", rep.ReclaimableBytes).Debug("reaper pass")
		}
	}
}

// Reap runs one reaper pass.
func (s *store) Reap(ctx context.Context) (ReapReport, error) {
	s.reaper.mu.Lock() // one pass at a time on this node
	defer s.reaper.mu.Unlock()
	var rep ReapReport
	lk, err := s.coord.Lock(ctx, LockRequest{Op: OpUpdate, Resource: api.ReapLockResource})
	if errors.Is(err, ErrBusy) {
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("reaper: %w", err)
	}
	defer func() {
		if err := lk.Unlock(context.WithoutCancel(ctx), true, nil); err != nil {
			log.G(ctx).WithError(err).Warn("reaper: releasing the reap lock")
		}
	}()
	rep.Ran = true
	refs := map[string]bool{}
	err = s.coord.Refs(ctx, func(resource string, nodes []string) error {
		refs[resource] = len(nodes) > 0
		return nil
	})
	if err != nil {
		return rep, fmt.Errorf("reaper: listing references: %w", err)
	}
	if err := s.reapOrphans(ctx, refs, &rep); err != nil {
		return rep, err
	}
	s.reapDangling(ctx, refs, &rep)
	if err := s.reapLeftovers(ctx, &rep); err != nil {
		return rep, err
	}
	s.metrics.reapable.Set(float64(rep.ReclaimableBytes))
	return rep, nil
}

// reapOrphans deletes the blobs nobody references, older than the grace.
func (s *store) reapOrphans(ctx context.Context, refs map[string]bool, rep *ReapReport) error {
	var orphans []content.Info
	err := s.local.Walk(ctx, func(info content.Info) error {
		if !refs[info.Digest.String()] {
			rep.ReclaimableBytes += info.Size
			if time.Since(info.CreatedAt) >= s.reapGrace {
				orphans = append(orphans, info)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reaper: walking blobs: %w", err)
	}
	for _, info := range orphans {
		lk, err := s.coord.Lock(ctx, LockRequest{Op: OpDelete, Resource: info.Digest.String(), Reap: ReapOrphan})
		if err != nil {
			if !isRefusal(err) {
				return fmt.Errorf("reaper: %w", err)
			}
			continue // referenced meanwhile, being pulled, or a member unsynced
		}
		if err := s.removeLocked(ctx, info.Digest, lk); err != nil {
			return fmt.Errorf("reaper: %w", err)
		}
		if _, err := os.Stat(s.blobPath(info.Digest)); errors.Is(err, fs.ErrNotExist) {
			rep.Orphans++
			rep.OrphanBytes += info.Size
			s.metrics.reaped.WithLabelValues("orphan").Inc()
		}
	}
	return nil
}

// reapDangling drops the references to blobs that have been missing for
// the grace.
func (s *store) reapDangling(ctx context.Context, refs map[string]bool, rep *ReapReport) {
	now := time.Now()
	seen := s.reaper.dangling
	if seen == nil {
		seen = map[string]time.Time{}
		s.reaper.dangling = seen
	}
	for id := range seen {
		if !refs[id] {
			delete(seen, id)
		}
	}
	for id := range refs {
		d, err := digest.Parse(id)
		if err != nil {
			continue
		}
		if _, err := os.Stat(s.blobPath(d)); !errors.Is(err, fs.ErrNotExist) {
			delete(seen, id)
			continue
		}
		first, ok := seen[id]
		if !ok {
			seen[id], first = now, now
		}
		if now.Sub(first) < s.reapGrace {
			continue
		}
		lk, err := s.coord.Lock(ctx, LockRequest{Op: OpDelete, Resource: id, Reap: ReapDangling})
		if err != nil {
			continue
		}
		// Under the delete lock no pull can commit it: look once more.
		_, err = os.Stat(s.blobPath(d))
		missing := errors.Is(err, fs.ErrNotExist)
		if uerr := lk.Unlock(context.WithoutCancel(ctx), missing, nil); uerr == nil && missing {
			rep.Dangling++
			delete(seen, id)
			s.metrics.reaped.WithLabelValues("dangling").Inc()
		}
	}
}

// reapLeftovers removes the ingests and node markers of nodes that are no
// longer members, and old trash, all older than the grace.
func (s *store) reapLeftovers(ctx context.Context, rep *ReapReport) error {
	members, err := s.coord.Members(ctx)
	if err != nil {
		return fmt.Errorf("reaper: listing members: %w", err)
	}
	member := map[string]bool{s.nodeID: true}
	for _, m := range members {
		member[m] = true
	}
	old := func(fi fs.FileInfo) bool { return time.Since(fi.ModTime()) >= s.reapGrace }

	ingests, _ := os.ReadDir(filepath.Join(s.root, "ingest"))
	for _, e := range ingests {
		dir := filepath.Join(s.root, "ingest", e.Name())
		ref, err := os.ReadFile(filepath.Join(dir, "ref"))
		node, _, ok := strings.Cut(string(ref), "/")
		fi, serr := os.Stat(dir)
		if err != nil || !ok || member[node] || serr != nil || !old(fi) {
			continue
		}
		if os.RemoveAll(dir) == nil {
			rep.Ingests++
			s.metrics.reaped.WithLabelValues("ingest").Inc()
		}
	}
	markers, _ := os.ReadDir(nodesDir(s.root))
	for _, e := range markers {
		fi, err := e.Info()
		if err != nil || member[e.Name()] || !old(fi) {
			continue
		}
		if os.Remove(filepath.Join(nodesDir(s.root), e.Name())) == nil {
			rep.Markers++
		}
	}
	trash, _ := os.ReadDir(filepath.Join(s.root, TrashDir))
	for _, e := range trash {
		fi, err := e.Info()
		if err != nil || !old(fi) {
			continue
		}
		if os.RemoveAll(filepath.Join(s.root, TrashDir, e.Name())) == nil {
			rep.Trash++
			s.metrics.reaped.WithLabelValues("trash").Inc()
		}
	}
	return nil
}
