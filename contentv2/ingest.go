package contentv2

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/filters"
	"github.com/containerd/errdefs"
)

// Ingests are node-scoped: every ref is stored as "<node>/<ref>" in the
// shared directory, so two nodes writing the same ref never share an ingest
// directory, and one node's garbage collector sees (and aborts) only its
// own ingests. A follower (follower.go) is an ingest of this node while it
// waits; its status shows the holder's progress (progress.go).

func (s *store) nodeRef(ref string) string { return s.nodeID + "/" + ref }

// eachIngest calls fn with the directory and the node-scoped ref of every
// ingest in root, of every node, as containerd's local store lays them
// out (ingest/<id>/ref). An ingest whose ref file is gone (being made or
// removed) is skipped, as containerd's store skips it.
func eachIngest(root string, fn func(dir, nref string) error) error {
	dir := filepath.Join(root, "ingest")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "ref"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := fn(filepath.Join(dir, e.Name()), string(b)); err != nil {
			return err
		}
	}
	return nil
}

// userRef maps an underlying ref back; ok is false for another node's.
func (s *store) userRef(ref string) (string, bool) {
	return strings.CutPrefix(ref, s.nodeID+"/")
}

func (s *store) Status(ctx context.Context, ref string) (content.Status, error) {
	st, err := s.local.Status(ctx, s.nodeRef(ref))
	if errdefs.IsNotFound(err) {
		if f := s.follower(ref); f != nil {
			return f.progressStatus(ctx)
		}
	}
	if err != nil {
		return st, err
	}
	st.Ref = ref
	return st, nil
}

// follower returns the follower open under ref, if any.
func (s *store) follower(ref string) *follower {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.followers[ref]
}

// ListStatuses lists this node's ingests; filters apply to the refs as the
// caller knows them. A half-made ingest is left out (halfmade.go).
func (s *store) ListStatuses(ctx context.Context, fs ...string) ([]content.Status, error) {
	filter, err := filters.ParseAll(fs...)
	if err != nil {
		return nil, err
	}
	// Not the local store's ListStatuses: one half-made ingest of any
	// node fails it (halfmade.go).
	nrefs, err := s.ownIngests(ctx)
	if err != nil {
		return nil, err
	}
	var out []content.Status
	seen := map[string]bool{}
	for _, nref := range nrefs {
		st, err := s.local.Status(ctx, nref)
		if errdefs.IsNotFound(err) {
			s.rememberHalfMade(ctx, nref, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		ref, _ := s.userRef(nref)
		st.Ref = ref
		seen[ref] = true
		if filter.Match(statusAdaptor(st)) {
			out = append(out, st)
		}
	}
	s.mu.Lock()
	followers := make([]*follower, 0, len(s.followers))
	for ref, f := range s.followers {
		if !seen[ref] {
			followers = append(followers, f)
		}
	}
	s.mu.Unlock()
	for _, f := range followers {
		if st, err := f.progressStatus(ctx); err == nil && filter.Match(statusAdaptor(st)) {
			out = append(out, st)
		}
	}
	return out, nil
}

// Abort removes the ingest; a follower's wait ends.
func (s *store) Abort(ctx context.Context, ref string) error {
	f := s.follower(ref)
	if f != nil {
		f.Close()
	}
	err := s.local.Abort(ctx, s.nodeRef(ref))
	if f != nil && errdefs.IsNotFound(err) {
		return nil
	}
	return err
}

// statusAdaptor exposes a Status's fields to filters, as the local store
// does: only "ref" is filterable.
func statusAdaptor(st content.Status) filters.Adaptor {
	return filters.AdapterFunc(func(fieldpath []string) (string, bool) {
		if len(fieldpath) == 1 && fieldpath[0] == "ref" {
			return st.Ref, true
		}
		return "", false
	})
}
