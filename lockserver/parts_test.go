package lockserver

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sweepOf runs, at now, the sweep of the shard of resourceID.
func (c *Coordinator) sweepOf(resourceID string, now time.Time) {
	c.locks.sweep(shardIndex(resourceID, len(c.locks.shards)), now)
}

// TestPartsKeepToTheirState: no part reaches into another's state
// (docs/design.md §3.11); what one asks of another goes through seams.go.
// The check is by field name, over the files of each part.
func TestPartsKeepToTheirState(t *testing.T) {
	// Names of fields only their part has (the references part's
	// membersView is called members, so the members' map is known by its
	// mutex).
	lockState := []string{"shards", "resources", "keys", "queue", "released", "streams", "fences"}
	refState := []string{"stripes", "adding", "recent", "recentFloor"}
	memberState := []string{"mmu", "markers", "root"}
	// The members part has two halves, the sessions' (memberPart) and the
	// syncs' (syncs.go), under one mutex: the syncs change the members
	// they sync, so of memberPart's state they are refused only what is
	// not theirs; memberPart reaches the syncs' state only through
	// syncsView.
	syncState := []string{"syncLimits", "syncMetrics"}
	membersOnly := []string{"markers", "root"}
	locks := []string{"locks.go", "lock.go", "acquire.go", "queue.go", "state.go", "leases.go", "deletes.go", "reaplock.go",
		"subscribe.go", "nodestream.go", "bounds.go", "sweep.go", "fence.go", "cancelled.go", "held.go"}
	refs := []string{"references.go", "refs.go", "deleterule.go", "reap.go", "commitwait.go", "pins.go"}
	syncs := []string{"syncs.go", "sync.go", "syncstep.go", "synchash.go", "syncbounds.go", "syncwrite.go", "syncshare.go", "olderresync.go"}
	// The front and what every part shares; every other file is the
	// members'.
	shared := []string{"coordinator.go", "seams.go", "state_store.go", "health.go", "config.go", "metrics.go",
		"validate.go", "admin.go", "dump.go", "hashid.go", "doc.go", "wrongcluster.go", "timing.go", "skipref.go"}
	all, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var members []string
	for _, f := range all {
		if !strings.HasSuffix(f, "_test.go") && !slices.Contains(locks, f) && !slices.Contains(refs, f) && !slices.Contains(syncs, f) &&
			!slices.Contains(shared, f) {
			members = append(members, f)
		}
	}
	require.Contains(t, members, "members.go")
	require.NotContains(t, members, "sync.go")
	parts := []struct {
		files     []string
		forbidden [][]string
	}{
		{locks, [][]string{refState, memberState, syncState}},
		{refs, [][]string{lockState, memberState, syncState}},
		{members, [][]string{lockState, refState, syncState}},
		{syncs, [][]string{lockState, refState, membersOnly}},
	}
	for _, p := range parts {
		forbidden := map[string]bool{}
		for _, names := range p.forbidden {
			for _, n := range names {
				forbidden[n] = true
			}
		}
		for _, f := range p.files {
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
			require.NoError(t, err)
			ast.Inspect(file, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && forbidden[sel.Sel.Name] {
					t.Errorf("%s reaches into another part's state: .%s", f, sel.Sel.Name)
				}
				return true
			})
		}
	}
}
