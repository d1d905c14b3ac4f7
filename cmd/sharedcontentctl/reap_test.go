package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// paths are the leftovers of a dry run's plan.
type paths = []struct {
	Path string `json:"path"`
}

// dryRun is the part of `reap --dry-run -o json` this test reads.
type dryRun struct {
	Orphans []struct {
		Digest string `json:"digest"`
	} `json:"orphans"`
	Ingests paths `json:"ingests"`
	Markers paths `json:"markers"`
	Trash   paths `json:"trash"`
}

// listed is the dry run's plan as root-relative paths, sorted.
func (d dryRun) listed() []string {
	var out []string
	for _, o := range d.Orphans {
		dg := digest.Digest(o.Digest)
		out = append(out, filepath.Join("blobs", dg.Algorithm().String(), dg.Encoded()))
	}
	for _, l := range []paths{d.Ingests, d.Markers, d.Trash} {
		for _, f := range l {
			out = append(out, f.Path)
		}
	}
	slices.Sort(out)
	return out
}

// reapables lists what a reaper may remove under root: blob files,
// ingests, node markers and trash entries, root-relative.
func reapables(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, dir := range []string{"blobs/sha256", "ingest", filepath.Join(contentv2.MetaDir, "nodes"), contentv2.TrashDir} {
		ents, err := os.ReadDir(filepath.Join(root, dir))
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		for _, e := range ents {
			out[filepath.Join(dir, e.Name())] = true
		}
	}
	return out
}

// TestReapDryRunIsThePass (docs/design.md §8.12): `reap --dry-run` lists
// exactly what the following reaper pass removes: it respects the grace
// (young orphans, ingests, markers and trash are not listed) and lists
// the old ingests and markers of nodes that are not members.
//
// Before, the dry run had logic of its own: it listed every unreferenced
// blob however young, and no ingest or marker.
func TestReapDryRunIsThePass(t *testing.T) {
	const grace = time.Hour // the default of both the plugin and the dry run
	// The coordinator's own reap grace (it refuses reap deletes for that
	// long after it starts, and within it of a resource's activity) is a
	// check beyond the plan; off here, so that the pass is the plan alone.
	cfg := lockserver.DefaultConfig()
	cfg.ReapGrace = 0
	c := lockservertest.Start(t, lockservertest.WithConfig(cfg))
	ctx := context.Background()
	l := c.Core()
	root := t.TempDir()
	old := time.Now().Add(-2 * grace)
	write := func(rel string, aged bool) string {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("content of "+rel), 0o644))
		if aged {
			require.NoError(t, os.Chtimes(p, old, old))
			require.NoError(t, os.Chtimes(filepath.Dir(p), old, old))
		}
		return rel
	}
	blob := func(name string, aged bool) (digest.Digest, string) {
		d := digest.FromString(name)
		return d, write(filepath.Join("blobs/sha256", d.Encoded()), aged)
	}

	client, err := lockclient.New(c.URL(), lockclient.WithNodeID("node-1"))
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	cs, err := contentv2.NewStore(root, "node-1", remote.New(client),
		contentv2.WithStateDir(t.TempDir()), contentv2.WithReaper(0, grace))
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	// node-2 is a member; ghost and ghost-2 are not.
	_, err = l.Session(ctx, api.SessionRequest{NodeID: "node-2"})
	require.NoError(t, err)
	_, err = l.SyncRefs(ctx, "node-2", api.SyncRequest{SyncID: "s", Done: true})
	require.NoError(t, err)

	used, _ := blob("used", true)
	_, err = l.AddRef(ctx, used.String(), "node-2")
	require.NoError(t, err)
	_, err = l.AddRef(ctx, digest.FromString("missing").String(), "node-2") // dangling, seen from now on
	require.NoError(t, err)
	_, oldOrphan := blob("old orphan", true)
	blob("young orphan", false)
	write("ingest/a/ref", false)
	oldGhostIngest := filepath.Dir(write("ingest/ghost-old/ref", true))
	require.NoError(t, os.WriteFile(filepath.Join(root, "ingest/ghost-old/ref"), []byte("ghost/layer-1"), 0o644))
	require.NoError(t, os.Chtimes(filepath.Join(root, oldGhostIngest), old, old))
	write("ingest/ghost-young/ref", false)
	require.NoError(t, os.WriteFile(filepath.Join(root, "ingest/ghost-young/ref"), []byte("ghost/layer-2"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "ingest/a/ref"), []byte("node-2/layer-3"), 0o644))
	require.NoError(t, os.Chtimes(filepath.Join(root, "ingest/a"), old, old))
	nodes := filepath.Join(contentv2.MetaDir, "nodes")
	oldGhostMarker := write(filepath.Join(nodes, "ghost"), true)
	write(filepath.Join(nodes, "ghost-2"), false)
	write(filepath.Join(nodes, "node-2"), true) // a member's, however old
	oldTrash := write(filepath.Join(contentv2.TrashDir, "old.1"), true)
	write(filepath.Join(contentv2.TrashDir, "young.1"), false)

	before := reapables(t, root)
	var dry dryRun
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "--coordinator", c.URL(), "--root", root, "-o", "json", "reap", "--dry-run")), &dry))
	table := ctl(t, "--coordinator", c.URL(), "--root", root, "reap", "--dry-run")
	require.Contains(t, table, "nothing was removed")
	require.Equal(t, before, reapables(t, root), "a dry run removes nothing")
	want := []string{oldOrphan, oldGhostIngest, oldGhostMarker, oldTrash}
	slices.Sort(want)
	require.Equal(t, want, dry.listed(), "the dry run lists what is older than the grace and no member's")

	rep, err := cs.Reap(ctx)
	require.NoError(t, err)
	require.True(t, rep.Ran)
	var removed []string
	for p := range before {
		if !reapables(t, root)[p] {
			removed = append(removed, p)
		}
	}
	slices.Sort(removed)
	require.Equal(t, dry.listed(), removed, "the reaper pass removed exactly what the dry run listed")
	refs, err := l.Refs(ctx, digest.FromString("missing").String())
	require.NoError(t, err)
	require.Equal(t, []string{"node-2"}, refs.Nodes, "a reference seen dangling only now stays for the grace")
	require.False(t, strings.Contains(table, "young"), "nothing within the grace is listed:\n%s", table)
}
