package contentv2

import (
	"context"
	"strings"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/pkg/filters"
)

// Ingests are node-scoped: every ref is stored as "<node>/<ref>" in the
// shared directory, so two nodes writing the same ref never share an ingest
// directory, and one node's garbage collector sees (and aborts) only its
// own ingests.

func (s *store) nodeRef(ref string) string { return s.nodeID + "/" + ref }

// userRef maps an underlying ref back; ok is false for another node's.
func (s *store) userRef(ref string) (string, bool) {
	return strings.CutPrefix(ref, s.nodeID+"/")
}

func (s *store) Status(ctx context.Context, ref string) (content.Status, error) {
	st, err := s.local.Status(ctx, s.nodeRef(ref))
	if err != nil {
		return st, err
	}
	st.Ref = ref
	return st, nil
}

// ListStatuses lists this node's ingests; filters apply to the refs as the
// caller knows them.
func (s *store) ListStatuses(ctx context.Context, fs ...string) ([]content.Status, error) {
	filter, err := filters.ParseAll(fs...)
	if err != nil {
		return nil, err
	}
	all, err := s.local.ListStatuses(ctx)
	if err != nil {
		return nil, err
	}
	var out []content.Status
	for _, st := range all {
		ref, ok := s.userRef(st.Ref)
		if !ok {
			continue
		}
		st.Ref = ref
		if filter.Match(statusAdaptor(st)) {
			out = append(out, st)
		}
	}
	return out, nil
}

func (s *store) Abort(ctx context.Context, ref string) error {
	return s.local.Abort(ctx, s.nodeRef(ref))
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
