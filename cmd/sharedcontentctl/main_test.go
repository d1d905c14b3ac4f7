package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

const (
	used   = "sha256:" + "aa00000000000000000000000000000000000000000000000000000000000000"
	orphan = "sha256:" + "bb00000000000000000000000000000000000000000000000000000000000000"
	gone   = "sha256:" + "cc00000000000000000000000000000000000000000000000000000000000000"
)

// setup starts a real coordinator and writes a shared root: a blob node-1
// and node-2 reference, an orphan, a reference to a missing blob, and a
// .trash entry.
func setup(t *testing.T) (server, root string) {
	t.Helper()
	c := lockservertest.Start(t)
	ctx := context.Background()
	l := c.Core()
	for _, n := range []string{"node-1", "node-2"} {
		_, err := l.Session(ctx, api.SessionRequest{NodeID: n})
		require.NoError(t, err)
		_, err = l.AddRef(ctx, used, n)
		require.NoError(t, err)
	}
	_, err := l.AddRef(ctx, gone, "node-1")
	require.NoError(t, err)

	root = t.TempDir()
	write := func(rel string, size int) {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte("x"), size), 0o644))
	}
	write("blobs/sha256/"+strings.TrimPrefix(used, "sha256:"), 3000)
	write("blobs/sha256/"+strings.TrimPrefix(orphan, "sha256:"), 500)
	write(filepath.Join(contentv2.TrashDir, "x-1"), 70)
	return c.URL(), root
}

func ctl(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, run(args, &out, io.Discard), "sharedcontentctl %v", args)
	return out.String()
}

func TestRefs(t *testing.T) {
	server, root := setup(t)
	var r refsReport
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "--coordinator", server, "--root", root, "-o", "json", "refs", used)), &r))
	require.Equal(t, refsReport{Digest: used, Nodes: []string{"node-1", "node-2"}, File: "present", Size: 3000}, r)
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "--coordinator", server, "--root", root, "-o", "json", "refs", gone)), &r))
	require.Equal(t, "missing", r.File, "a reference to a blob whose file is gone")
	table := ctl(t, "--coordinator", server, "refs", orphan)
	require.Contains(t, table, "(none)")
	require.Contains(t, table, "(no --root)")
}

func TestDuAndReapDryRun(t *testing.T) {
	server, root := setup(t)
	var u diskUsage
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "--coordinator", server, "--root", root, "-o", "json", "du")), &u))
	require.Equal(t, 2, u.Blobs)
	require.EqualValues(t, 3500, u.Bytes)
	require.Equal(t, map[string]int64{"node-1": 3000, "node-2": 3000}, u.PerNode)
	require.Equal(t, []blob{{Digest: orphan, Size: 500}}, u.Orphans)
	require.Equal(t, []string{gone}, u.Dangling)
	require.Equal(t, 1, u.TrashFiles)
	require.EqualValues(t, 570, u.Reclaimable, "the orphan and the trash")

	dry := ctl(t, "--coordinator", server, "--root", root, "reap", "--dry-run", "--reap-grace", "0s")
	require.Contains(t, dry, orphan)
	require.Contains(t, dry, gone)
	require.Contains(t, dry, "nothing was removed")
	_, err := os.Stat(filepath.Join(root, "blobs/sha256", strings.TrimPrefix(orphan, "sha256:")))
	require.NoError(t, err, "a dry run removes nothing")
	require.Error(t, run([]string{"--coordinator", server, "reap"}, &bytes.Buffer{}, io.Discard), "only a dry run")
	require.Error(t, run([]string{"--coordinator", server, "du"}, &bytes.Buffer{}, io.Discard), "du needs --root")
}

func TestStatus(t *testing.T) {
	server, _ := setup(t)
	var r statusReport
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "--coordinator", server, "-o", "json", "status")), &r))
	require.NotEmpty(t, r.ClusterID)
	require.Len(t, r.Members, 2)
	require.Equal(t, []string{"node-1", "node-2"}, r.Unsynced, "sessions without a sync hold deletes back")
	require.Empty(t, r.MetricsError)
	require.Contains(t, r.Queued, "pull")
	table := ctl(t, "--coordinator", server, "status")
	require.Contains(t, table, "deletes are held back until these nodes sync: node-1, node-2")
	require.Error(t, run([]string{"--coordinator", server, "-o", "yaml", "status"}, &bytes.Buffer{}, io.Discard))
}

// TestStatusReplicas: with the URLs of a coordinator's replicas, status
// reaches the leader whatever the order, lists each URL with its role and
// reads the leader's counters; a bad list is refused naming the bad URL.
func TestStatusReplicas(t *testing.T) {
	rs := lockservertest.StartReplicas(t, 2)
	down := "http://" + lockservertest.FreeAddr(t)
	list := rs[1].URL() + "," + rs[0].URL() + "," + down
	var r statusReport
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "--coordinator", list, "-o", "json", "status")), &r))
	require.Equal(t, rs[0].Core().Cluster().ClusterID, r.ClusterID)
	require.Empty(t, r.MetricsError)
	require.Len(t, r.Replicas, 3)
	require.Equal(t, []string{"standby", "leader", "unreachable"}, []string{r.Replicas[0].Role, r.Replicas[1].Role, r.Replicas[2].Role})
	require.Equal(t, rs[0].URL(), r.Replicas[0].Leader)
	table := ctl(t, "--coordinator", list, "status")
	require.Contains(t, table, rs[1].URL()+"  standby (leader: "+rs[0].URL()+")")
	require.Contains(t, table, down+"  unreachable (")

	err := run([]string{"--coordinator", rs[0].URL() + ",ftp://x", "status"}, &bytes.Buffer{}, io.Discard)
	require.ErrorContains(t, err, `"ftp://x"`)
}
