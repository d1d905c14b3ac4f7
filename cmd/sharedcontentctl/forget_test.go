package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestNodeForgetBulk (docs/design.md §10): `node forget` without an ID forgets every
// member that is not live and matches the selection (glob, last seen,
// bystanders); --dry-run lists them and changes nothing; an ID with a
// selection, or neither, is refused before anything is asked.
func TestNodeForgetBulk(t *testing.T) {
	c := lockservertest.Start(t)
	l := c.Core()
	ctx := context.Background()
	cluster := l.Cluster().ClusterID
	for _, req := range []api.SessionRequest{
		{NodeID: "oneoff-1"}, {NodeID: "oneoff-2"},
		{NodeID: "oneoff-live"},
		{NodeID: "node-a", ClusterID: cluster},
	} {
		req.InstanceID = "i-" + req.NodeID
		_, err := l.Session(ctx, req)
		require.NoError(t, err)
		if req.NodeID == "oneoff-2" { // a reference, added while its session lived
			_, err = l.AddRef(ctx, used, req.NodeID)
			require.NoError(t, err)
		}
		if req.NodeID != "oneoff-live" {
			_, err = l.EndSession(ctx, api.EndSessionRequest{NodeID: req.NodeID, InstanceID: req.InstanceID})
			require.NoError(t, err)
		}
	}
	members := func() []string {
		nodes, err := l.Nodes(ctx)
		require.NoError(t, err)
		var ids []string
		for _, n := range nodes.Nodes {
			ids = append(ids, n.NodeID)
		}
		return ids
	}
	all := members()
	forget := func(args ...string) forgetReport {
		t.Helper()
		var rep forgetReport
		out := ctl(t, append([]string{"--coordinator", c.URL(), "-o", "json", "node", "forget"}, args...)...)
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		return rep
	}

	rep := forget("--match", "oneoff-*", "--dry-run")
	require.Equal(t, forgetReport{DryRun: true, Forgotten: []string{"oneoff-1", "oneoff-2"}}, rep, "live members are never selected")
	require.Equal(t, all, members(), "a dry run changes nothing")
	require.Empty(t, forget("--not-seen-since", "1h").Forgotten, "everyone was seen within the hour")
	require.Equal(t, all, members())

	rep = forget("--bystanders")
	require.Equal(t, []string{"oneoff-1", "oneoff-2"}, rep.Forgotten)
	require.Equal(t, []string{"node-a", "oneoff-live"}, members())
	refs, err := l.Refs(ctx, used)
	require.NoError(t, err)
	require.Empty(t, refs.Nodes, "a forgotten member's references are dropped")

	for _, bad := range [][]string{{"node-a", "--match", "x"}, {}, {"--match", "[", "--dry-run"}} {
		args := append([]string{"--coordinator", c.URL(), "node", "forget"}, bad...)
		require.Error(t, run(args, io.Discard, io.Discard), "%v", bad)
	}
	require.Equal(t, []string{"node-a", "oneoff-live"}, members(), "refusals change nothing")

	var out bytes.Buffer
	require.NoError(t, run([]string{"--coordinator", c.URL(), "node", "forget", "--match", "node-*"}, &out, io.Discard))
	require.Contains(t, out.String(), "forgot 1 node(s)")
	require.Equal(t, []string{"oneoff-live"}, members())
}

// TestNodeRelease: `node release ID` lets another host take over a node
// ID that belongs to a host's lineage (docs/design.md §8.5): refused
// while a daemon holds the ID's session, then done, naming the lineage
// released, after which a session of another lineage is accepted.
func TestNodeRelease(t *testing.T) {
	c := lockservertest.Start(t)
	l := c.Core()
	ctx := context.Background()
	_, err := l.Session(ctx, api.SessionRequest{NodeID: "node-a", InstanceID: "i1", Generation: "g-old"})
	require.NoError(t, err)
	_, _, err = ctlErr("--coordinator", c.URL(), "node", "release", "node-a")
	require.ErrorContains(t, err, "live session")
	_, err = l.EndSession(ctx, api.EndSessionRequest{NodeID: "node-a", InstanceID: "i1"})
	require.NoError(t, err)
	_, err = l.Session(ctx, api.SessionRequest{NodeID: "node-a", InstanceID: "i2", Generation: "g-new"})
	require.ErrorIs(t, err, api.ErrDuplicateNode, "a clean end does not release the ID")

	out := ctl(t, "--coordinator", c.URL(), "node", "release", "node-a")
	require.Contains(t, out, "released node node-a")
	require.Contains(t, out, "g-old")
	_, err = l.Session(ctx, api.SessionRequest{NodeID: "node-a", InstanceID: "i2", Generation: "g-new"})
	require.NoError(t, err, "the next host takes the ID over")
	_, _, err = ctlErr("--coordinator", c.URL(), "node", "release")
	require.Error(t, err, "an ID is required")
}
