package contentv2

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
)

// Progress on every node (docs/design.md §5.10). While a follower waits,
// this node's Status and ListStatuses report for its ref the bytes the
// holder has written so far, so that `ctr pull` (and anything else that
// polls the ingests) shows the download moving on every node. The bytes
// are read from the holder's ingest in the shared root: its ref names the
// digest (containerd's refs always do: "layer-sha256:..."), so a scan of
// the ingest directory finds it, once; after that each status is one
// stat of its data file. Nothing is asked of the coordinator and nothing
// is written. The writer's own Status, which the proxy protocol reads
// (§5.4), is unchanged: offset 0 until the wait ends.

// progressRescan is how long a follower waits before it scans the ingest
// directory again when the last scan found no ingest of its holder (the
// holder has not opened it yet, or its ref names no digest).
const progressRescan = time.Second

// RootIngest is one ingest in the shared root, of any node.
type RootIngest struct {
	// Node is the node whose ingest it is; Ref the ingest's ref on that node.
	Node, Ref string
	// Digest is the blob the ref names ("" when it names none).
	Digest digest.Digest
	// Offset is the bytes written so far; UpdatedAt when the last were.
	Offset    int64
	UpdatedAt time.Time
	data      string // the data file
}

// RootIngests lists the ingests of every node in the shared root: what
// each node is downloading now. It reads each ingest's ref and stats its
// data file; an ingest that goes away meanwhile is left out.
func RootIngests(root string) ([]RootIngest, error) {
	return rootIngests(root, func(string) bool { return true })
}

// rootIngests lists the ingests in root whose node-scoped ref keep
// accepts.
func rootIngests(root string, keep func(nref string) bool) ([]RootIngest, error) {
	var out []RootIngest
	err := eachIngest(root, func(dir, nref string) error {
		if !keep(nref) {
			return nil
		}
		node, ref, _ := strings.Cut(nref, "/")
		in := RootIngest{Node: node, Ref: ref, Digest: digestFromRef(ref), data: filepath.Join(dir, "data")}
		fi, err := os.Stat(in.data)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		in.Offset, in.UpdatedAt = fi.Size(), fi.ModTime()
		out = append(out, in)
		return nil
	})
	return out, err
}

// holderProgress is what a follower knows of its holder's ingest.
type holderProgress struct {
	mu      sync.Mutex
	data    string    // protected by mu; the holder's data file, "" until found
	offset  int64     // protected by mu; its length at the last look
	updated time.Time // protected by mu
	scanned time.Time // protected by mu; the last scan that found none
}

// progressStatus is StatusNow with, while the follower waits, the
// holder's progress as its offset. It never waits for the holder; a call
// on the shared root is bounded by the storage timeout, and a failed one
// leaves the last offset known.
func (f *follower) progressStatus(ctx context.Context) (content.Status, error) {
	st, err := f.StatusNow()
	if err != nil {
		return st, err
	}
	if w, done := f.holder(); w != nil || done || f.outcomeErr() != nil {
		return st, nil
	}
	offset, updated := f.s.holderOffset(ctx, &f.progress, f.dgst)
	if st.Total > 0 {
		offset = min(offset, st.Total)
	}
	st.Offset = offset
	if updated.After(st.UpdatedAt) {
		st.UpdatedAt = updated
	}
	return st, nil
}

// holderOffset returns the bytes the holder of dgst has written, as far
// as p knows them after one look at the shared root. The look runs with
// the storage deadline; its results are kept only when it answered in
// time.
func (s *store) holderOffset(ctx context.Context, p *holderProgress, dgst digest.Digest) (int64, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.data == "" && now.Sub(p.scanned) < progressRescan {
		return p.offset, p.updated
	}
	var (
		data    = p.data
		found   []RootIngest
		gone    bool
		offset  int64
		updated time.Time
	)
	err := s.guard.do(ctx, "follower_progress", func() error {
		if data != "" {
			fi, err := os.Stat(data)
			if err == nil {
				offset, updated = fi.Size(), fi.ModTime()
				return nil
			}
			// Committed, or given up (another node may hold the lock
			// now): the next look scans again.
			gone = errors.Is(err, fs.ErrNotExist)
			if gone {
				return nil
			}
			return err
		}
		var err error
		found, err = rootIngests(s.root, func(nref string) bool {
			return !strings.HasPrefix(nref, s.nodeID+"/") && digestFromRef(nref) == dgst
		})
		return err
	})
	switch {
	case err != nil:
		log.G(ctx).WithError(err).WithField("digest", dgst).Debug("reading the holder's progress")
	case gone:
		p.data = ""
	case data != "":
		p.offset, p.updated = offset, updated
	default:
		p.scanned = now
		// An ingest another node left in a crash may name the digest
		// too: the one written last is the holder's.
		for i, in := range found {
			if i == 0 || in.UpdatedAt.After(p.updated) {
				p.data, p.offset, p.updated = in.data, in.Offset, in.UpdatedAt
			}
		}
	}
	return p.offset, p.updated
}
