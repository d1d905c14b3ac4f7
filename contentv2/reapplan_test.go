package contentv2

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"
)

// listedRefs is a ReapSource of fixed references, given in the order
// Refs yields them; during calls fn before yielding the i-th.
type listedRefs struct {
	refs   []ReapRef
	during func(i int)
}

func (l listedRefs) Refs(_ context.Context, fn func(string, []string) error) error {
	for i, r := range l.refs {
		if l.during != nil {
			l.during(i)
		}
		if err := fn(r.Resource, r.Nodes); err != nil {
			return err
		}
	}
	return nil
}

func (listedRefs) Members(context.Context) (Membership, error) { return Membership{}, nil }

// writeBlob writes the blob named name into root, aged age.
func writeBlob(t *testing.T, root, name string, age time.Duration) digest.Digest {
	t.Helper()
	d := digest.FromString(name)
	p := blobPathIn(root, d)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(name), 0o644))
	at := time.Now().Add(-age)
	require.NoError(t, os.Chtimes(p, at, at))
	return d
}

// TestPlanReapMergesReferencesWithTheListing: the references, in resource
// ID order, merged with the sorted blob listing: a blob whose set names
// no node is an orphan like an unreferenced one, a reference to a blob not
// listed is dangling, and one whose blob is written during the walk is
// not. Both ways of checking the references not listed (a stat each, or a
// new listing when they outnumber the blobs) decide alike.
func TestPlanReapMergesReferencesWithTheListing(t *testing.T) {
	for _, blobs := range []int{2, 12} { // fewer / more blobs than references not listed
		t.Run(fmt.Sprintf("blobs=%d", blobs), func(t *testing.T) {
			root := t.TempDir()
			var listed []digest.Digest
			for i := range blobs {
				listed = append(listed, writeBlob(t, root, fmt.Sprintf("blob %d", i), 2*reapGrace))
			}
			refs := []ReapRef{
				{Resource: listed[0].String(), Nodes: []string{"node-1"}},
				{Resource: listed[1].String(), Nodes: []string{}},
			}
			for i := range 4 {
				refs = append(refs, ReapRef{Resource: digest.FromString(fmt.Sprintf("missing %d", i)).String(), Nodes: []string{"node-2"}})
			}
			late := digest.FromString("written during the walk")
			refs = append(refs, ReapRef{Resource: late.String(), Nodes: []string{"node-3"}})
			sortRefs(refs)
			src := listedRefs{refs: refs, during: func(i int) {
				if i == 0 {
					writeBlob(t, root, "written during the walk", 0)
				}
			}}

			plan, err := PlanReap(context.Background(), root, src, ReapOptions{Grace: reapGrace}, &ReapMemory{})
			require.NoError(t, err)
			orphans := blobDigests(plan.Orphans)
			require.Contains(t, orphans, listed[1], "a set of no node does not keep its blob")
			require.NotContains(t, orphans, listed[0])
			require.Len(t, orphans, blobs-1)
			require.Equal(t, 4, plan.WaitingDangling, "the missing blobs, not the one written during the walk")
			require.Empty(t, plan.Dangling, "within the grace")
		})
	}
}

// TestPlanReapRefusesUnorderedReferences: references out of resource ID
// order cannot be merged with the listing: the plan fails and plans
// nothing.
func TestPlanReapRefusesUnorderedReferences(t *testing.T) {
	root := t.TempDir()
	a, b := writeBlob(t, root, "a", 2*reapGrace), writeBlob(t, root, "b", 2*reapGrace)
	refs := []ReapRef{{Resource: a.String(), Nodes: []string{"n"}}, {Resource: b.String(), Nodes: []string{"n"}}}
	sortRefs(refs)
	refs[0], refs[1] = refs[1], refs[0]
	_, err := PlanReap(context.Background(), root, listedRefs{refs: refs}, ReapOptions{Grace: reapGrace}, &ReapMemory{})
	require.ErrorContains(t, err, "not in resource ID order")
}

func sortRefs(refs []ReapRef) {
	slices.SortFunc(refs, func(a, b ReapRef) int { return strings.Compare(a.Resource, b.Resource) })
}
