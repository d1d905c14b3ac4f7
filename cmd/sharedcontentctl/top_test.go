package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// TestTop: `top` lists each pull lock held at the coordinator as a
// download: its blob, its holder, and the nodes waiting for it in queue
// order; with --root, the bytes the holder's ingest holds. Output that is
// not a terminal gets one print without --once; a bad --interval is
// refused naming it.
func TestTop(t *testing.T) {
	ctx := context.Background()
	c := lockservertest.Start(t)
	server, root := c.URL(), t.TempDir()
	lock := func(node string) {
		t.Helper()
		_, err := c.Core().Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: used, NodeID: node, Wait: new(true)})
		require.NoError(t, err)
	}
	lock("node-1")
	lock("node-2")
	lock("node-3")
	// node-1's ingest of the blob, 1234 bytes in; another node's ingest
	// of it (left by a crash) is not the holder's.
	ingest := func(dir, ref string, size int) {
		p := filepath.Join(root, "ingest", dir)
		require.NoError(t, os.MkdirAll(p, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(p, "ref"), []byte(ref), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(p, "data"), make([]byte, size), 0o644))
	}
	ingest("a", "node-1/default/7/layer-"+used, 1234)
	ingest("b", "node-9/default/3/layer-"+used, 99)

	var r topReport
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "--coordinator", server, "--root", root, "-o", "json", "top")), &r))
	require.Equal(t, 1, r.Total)
	require.Len(t, r.Downloads, 1)
	d := r.Downloads[0]
	require.Equal(t, used, d.Blob)
	require.Equal(t, "node-1", d.Holder)
	require.False(t, d.Since.IsZero())
	require.Equal(t, 2, d.Waiters)
	require.Equal(t, []string{"node-2", "node-3"}, d.WaiterNodes)
	require.NotNil(t, d.Bytes)
	require.Equal(t, int64(1234), *d.Bytes, "the holder's ingest, not another node's")

	table := ctl(t, "--coordinator", server, "--root", root, "top") // not a terminal: once
	require.Contains(t, table, "1 download(s) in flight")
	require.Regexp(t, used+` +node-1 +\S+ +1\.2 KiB +2 \(node-2, node-3\)`, table)
	require.Regexp(t, used+` +node-1 +\S+ +- +2 \(`, ctl(t, "--coordinator", server, "top", "--once"), "no bytes without --root")

	_, err := c.Core().Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: digest.FromString("other").String(), NodeID: "node-2"})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "--coordinator", server, "-o", "json", "top")), &r))
	require.Equal(t, 2, r.Total, "a second download")
	require.Equal(t, used, r.Downloads[0].Blob, "the oldest first")
	require.Nil(t, r.Downloads[1].Bytes)

	err = run([]string{"--coordinator", server, "--root", filepath.Join(root, "missing"), "top"}, io.Discard, io.Discard)
	require.ErrorContains(t, err, "--root")
	_, err = parseArgs([]string{"top", "--interval", "soon"}, io.Discard)
	require.ErrorContains(t, err, "interval")
}

// TestTopRedraws: in a terminal, top clears the screen and draws the
// downloads again at each interval, a download that ended gone from the
// next drawing, until it is interrupted.
func TestTopRedraws(t *testing.T) {
	ctx := context.Background()
	c := lockservertest.Start(t)
	resp, err := c.Core().Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: used, NodeID: "node-1"})
	require.NoError(t, err)
	client, err := lockclient.New(c.URL(), lockclient.WithNodeID("sharedcontentctl"))
	require.NoError(t, err)
	defer client.Close()

	rctx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	screen := &drawings{}
	screen.drawn = func(n int) {
		if n == 1 { // the download ends after the first drawing
			_, err := c.Core().Unlock(ctx, api.UnlockRequest{Type: api.OperationPull, ResourceID: used, LeaseID: resp.LeaseID, NodeID: "node-1", Error: "gave up"})
			require.NoError(t, err)
		}
		if n == 3 {
			interrupt()
		}
	}
	p, err := newPrinter(screen, "table")
	require.NoError(t, err)
	require.NoError(t, redraw(rctx, client, "", time.Millisecond, p, screen))
	frames := strings.Split(screen.buf.String(), clearScreen)[1:]
	require.GreaterOrEqual(t, len(frames), 2, "drawn again")
	require.Contains(t, frames[0], "1 download(s) in flight")
	require.Contains(t, frames[0], used+"  node-1")
	require.Contains(t, frames[len(frames)-1], "0 download(s) in flight")
}

// drawings is a terminal that calls drawn with the count of screens
// cleared so far, after each clear.
type drawings struct {
	buf   strings.Builder
	n     int
	drawn func(n int)
}

func (d *drawings) Write(p []byte) (int, error) {
	d.buf.Write(p)
	if strings.Contains(string(p), clearScreen) {
		d.n++
		d.drawn(d.n)
	}
	return len(p), nil
}
