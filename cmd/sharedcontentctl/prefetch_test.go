package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/contentv2test"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/registry"
	testregistry "github.com/sharedcontent/sharedcontent/internal/testutil/registry"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// prefetchEnv is a coordinator, an empty shared root and a registry that
// asks for basic auth, with a pushed image.
type prefetchEnv struct {
	server, root string
	reg          *testregistry.Registry
	img          testregistry.Image
	// args are the flags every prefetch of the test takes.
	args []string
}

func newPrefetchEnv(t *testing.T) prefetchEnv {
	t.Helper()
	reg, err := testregistry.Start(testregistry.WithBasicAuth("ops", "pw"))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	img, err := reg.PushRandom(context.Background(), "app/web:v1", 3, 32<<10)
	require.NoError(t, err)
	reg.ResetCounters()
	e := prefetchEnv{server: lockservertest.Start(t).URL(), root: t.TempDir(), reg: reg, img: img}
	e.args = []string{"--coordinator", e.server, "--root", e.root, "--hosts-dir", t.TempDir(), "--user", "ops:pw", "--node-id", "prefetch-test"}
	return e
}

// prefetch runs `prefetch IMAGE` with the env's flags and more.
func (e prefetchEnv) prefetch(more ...string) (string, error) {
	var out bytes.Buffer
	err := run(append(append([]string{"prefetch", e.img.Ref}, e.args...), more...), &out, io.Discard)
	return out.String(), err
}

// blobs returns the blobs of the shared root.
func (e prefetchEnv) blobs(t *testing.T) map[string]int64 {
	t.Helper()
	b, err := listBlobs(e.root)
	require.NoError(t, err)
	return b
}

// members returns the coordinator's members.
func (e prefetchEnv) members(t *testing.T) []string {
	t.Helper()
	c, err := lockclient.New(e.server, lockclient.WithNodeID("reader"))
	require.NoError(t, err)
	defer c.Close()
	resp, err := c.Nodes(context.Background())
	require.NoError(t, err)
	var out []string
	for _, n := range resp.Nodes {
		out = append(out, n.NodeID)
	}
	return out
}

// TestPrefetchThenNodePullsNothing (docs/design.md §5.9): a prefetch puts
// every blob of the image into the shared root, one download each, with
// one line per blob when its output is no terminal; it leaves no member
// behind; a node that pulls the image afterwards downloads no blob from
// the registry and can read every one.
func TestPrefetchThenNodePullsNothing(t *testing.T) {
	e := newPrefetchEnv(t)
	out, err := e.prefetch("--no-pin")
	require.NoError(t, err)
	for _, d := range e.img.Descriptors() {
		require.Equal(t, d.Size, e.blobs(t)[d.Digest.String()], "%s is in the shared root", d.Digest)
		require.Equal(t, 1, e.reg.BlobGets()[d.Digest.String()], "%s downloaded once", d.Digest)
		require.Contains(t, out, d.Digest.String()+" ", "a line for %s", d.Digest)
	}
	require.Contains(t, out, "prefetched "+e.img.Ref)
	require.Contains(t, out, "5 downloaded", "manifest, config, 3 layers")
	require.Contains(t, out, "not pinned")
	require.NotContains(t, out, "\r", "no bar when the output is no terminal")
	require.NotContains(t, e.members(t), "prefetch-test", "the prefetch's node is forgotten")

	// A node pulling the image now takes every blob from the root.
	ctx := contentv2test.Context(context.Background())
	c, err := lockclient.New(e.server, lockclient.WithNodeID("node-1"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	node, err := contentv2test.NewNode(ctx, "node-1", e.root, t.TempDir(), remote.New(c))
	require.NoError(t, err)
	t.Cleanup(func() { node.Close() })
	e.reg.ResetCounters()
	resolver, err := registry.NewResolver(ctx, registry.Options{User: "ops:pw"})
	require.NoError(t, err)
	name, target, err := resolver.Resolve(ctx, e.img.Ref)
	require.NoError(t, err)
	fetcher, err := resolver.Fetcher(ctx, name)
	require.NoError(t, err)
	require.NoError(t, images.Dispatch(ctx, images.Handlers(remotes.FetchHandler(node.CS, fetcher), images.ChildrenHandler(node.CS)), nil, target),
		"the node pulls as containerd does")
	require.Zero(t, e.reg.BlobBytes(), "the node downloaded no blob from the registry")
	require.Empty(t, e.reg.BlobGets())
	for _, d := range e.img.Descriptors() {
		b, err := os.ReadFile(filepath.Join(e.root, "blobs", d.Digest.Algorithm().String(), d.Digest.Encoded()))
		require.NoError(t, err)
		require.Equal(t, d.Digest, digest.FromBytes(b))
		_, err = node.CS.Info(ctx, d.Digest)
		require.NoError(t, err, "the node's containerd lists %s", d.Digest)
	}

	// Again: nothing to download, every blob present.
	e.reg.ResetCounters()
	var rep prefetchReport
	out, err = e.prefetch("--no-pin", "-o", "json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Zero(t, rep.Fetched)
	require.Equal(t, 5, rep.Present)
	require.Zero(t, e.reg.BlobBytes())
}

// TestPrefetchRefusesBeforeActing: bad flags (a pin name no pin may have),
// and a bad image name are refused before anything is downloaded or any
// member is made, with the error's class and what to change.
func TestPrefetchRefusesBeforeActing(t *testing.T) {
	e := newPrefetchEnv(t)
	for _, tc := range []struct {
		name  string
		args  []string
		class func(error) bool
		says  string
	}{
		{"bad pin name", []string{"--pin-name", "a/b"}, errdefs.IsInvalidArgument, "--pin-name"},
		{"no-pin and a pin name", []string{"--no-pin", "--pin-name", "web"}, errdefs.IsInvalidArgument, "--no-pin with --pin-name"},
		{"negative expiry", []string{"--pin-expires", "-1h"}, errdefs.IsInvalidArgument, "--pin-expires"},
		{"bad platform", []string{"--no-pin", "--platform", "linux/"}, errdefs.IsInvalidArgument, `--platform "linux/"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.prefetch(tc.args...)
			require.Error(t, err)
			require.True(t, tc.class(err), "%v", err)
			require.ErrorContains(t, err, tc.says)
		})
	}
	var out bytes.Buffer
	err := run([]string{"prefetch", "Bad Name", "--coordinator", e.server, "--root", e.root, "--no-pin"}, &out, io.Discard)
	require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
	require.ErrorContains(t, err, `"Bad Name"`)
	err = run([]string{"prefetch", e.img.Ref, "--coordinator", e.server, "--no-pin"}, &out, io.Discard)
	require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
	require.ErrorContains(t, err, "--root is required")

	require.Empty(t, e.blobs(t), "nothing downloaded")
	require.Zero(t, e.reg.BlobBytes())
	require.NotContains(t, e.members(t), "prefetch-test")
}

// TestPrefetchForgetsLeftover: a member of the prefetch's node ID that is
// not live (an earlier prefetch that stopped before forgetting it) is
// forgotten first, with a note, and the prefetch goes on.
func TestPrefetchForgetsLeftover(t *testing.T) {
	e := newPrefetchEnv(t)
	c, err := lockclient.New(e.server, lockclient.WithNodeID("prefetch-test"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	s, err := contentv2.NewStore(e.root, "prefetch-test", remote.New(c), contentv2.WithStateDir(t.TempDir()))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.Contains(t, e.members(t), "prefetch-test")

	var out, notes bytes.Buffer
	require.NoError(t, run(append([]string{"prefetch", e.img.Ref, "--no-pin"}, e.args...), &out, &notes))
	require.Contains(t, notes.String(), "forgot node prefetch-test, left by an earlier prefetch")
	require.True(t, strings.Contains(out.String(), "5 downloaded"), out.String())
	require.NotContains(t, e.members(t), "prefetch-test")
}

// TestPrefetchThroughMirror: --hosts-dir's hosts.toml sends an upstream
// host (one that does not exist) to its mirror, as containerd reads it:
// the prefetch downloads every blob from the mirror.
func TestPrefetchThroughMirror(t *testing.T) {
	e := newPrefetchEnv(t)
	const upstream = "upstream.invalid"
	hosts := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(hosts, upstream), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(hosts, upstream, "hosts.toml"), []byte(
		"server = \"https://"+upstream+"\"\n\n[host.\"http://"+e.reg.Host+"\"]\n  capabilities = [\"pull\", \"resolve\"]\n"), 0o644))
	ref := upstream + "/app/web:v1"

	var out bytes.Buffer
	require.NoError(t, run(append([]string{"prefetch", ref, "--no-pin"}, append(e.args, "--hosts-dir", hosts)...), &out, io.Discard))
	require.Contains(t, out.String(), "prefetched "+ref)
	for _, d := range e.img.Descriptors() {
		require.Equal(t, 1, e.reg.BlobGets()[d.Digest.String()], "%s from the mirror", d.Digest)
		require.Equal(t, d.Size, e.blobs(t)[d.Digest.String()])
	}
}

// TestPrefetchNeedsAdmin: a prefetch forgets its node when it ends, an
// admin call: with a node's token it is refused before anything is
// downloaded or any member made, saying which token.
func TestPrefetchNeedsAdmin(t *testing.T) {
	e := newPrefetchEnv(t)
	c := lockservertest.Start(t, lockservertest.WithNodeTokens(map[string]string{"node-1": "node-1-token"}),
		lockservertest.WithAdminToken("admin-token"))
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("node-1-token\n"), 0o600))
	var out bytes.Buffer
	err := run(append([]string{"prefetch", e.img.Ref, "--no-pin"}, append(e.args, "--coordinator", c.URL(), "--token-file", token)...), &out, io.Discard)
	require.Error(t, err)
	require.True(t, errdefs.IsPermissionDenied(err) || errdefs.IsUnauthorized(err), "%v", err)
	require.ErrorContains(t, err, "admin token")
	require.Empty(t, e.blobs(t), "nothing downloaded")
	require.Zero(t, e.reg.BlobBytes())

	require.NoError(t, os.WriteFile(token, []byte("admin-token\n"), 0o600))
	require.NoError(t, run(append([]string{"prefetch", e.img.Ref, "--no-pin"}, append(e.args, "--coordinator", c.URL(), "--token-file", token)...), &out, io.Discard),
		"the admin token prefetches")
	require.Len(t, e.blobs(t), 5)
}

// recordingPinner records the pins put.
type recordingPinner struct{ pins []api.Pin }

func (r *recordingPinner) PutPin(_ context.Context, p api.Pin) (api.Pin, error) {
	r.pins = append(r.pins, p)
	return p, nil
}

// TestPrefetchPins: after the download the image is pinned, named by
// --pin-name (default the full reference), holding every blob, expiring
// after --pin-expires; the summary says so.
func TestPrefetchPins(t *testing.T) {
	e := newPrefetchEnv(t)
	rec := &recordingPinner{}
	was := pinnerOf
	pinnerOf = func(*lockclient.Client) (pinner, error) { return rec, nil }
	t.Cleanup(func() { pinnerOf = was })

	before := time.Now()
	out, err := e.prefetch("--pin-name", "web", "--pin-expires", "24h")
	require.NoError(t, err)
	require.Len(t, rec.pins, 1)
	p := rec.pins[0]
	require.Equal(t, "web", p.Name)
	require.Equal(t, e.img.Ref, p.Image)
	want := e.img.Blobs()
	slices.Sort(want)
	require.Equal(t, want, p.ResourceIDs, "the pin holds every blob of the image")
	require.Equal(t, "prefetch-test", p.By)
	require.False(t, p.Created.Before(before.Truncate(time.Second)))
	require.NotNil(t, p.Expires)
	require.Equal(t, 24*time.Hour, p.Expires.Sub(p.Created))
	require.Contains(t, out, `pinned as "web" until `)

	out, err = e.prefetch()
	require.NoError(t, err)
	require.Equal(t, defaultPinName(e.img.Ref), rec.pins[1].Name, "the default name is made of the reference")
	require.Nil(t, rec.pins[1].Expires)
	require.Contains(t, out, "pin rm "+defaultPinName(e.img.Ref))

	// Through the real coordinator: the pin holds every blob, and its
	// copy in the root lets an adoption restore it (docs/design.md §8.21).
	pinnerOf = was
	_, err = e.prefetch("--pin-name", "web")
	require.NoError(t, err)
	c, err := lockclient.New(e.server, lockclient.WithNodeID("reader"))
	require.NoError(t, err)
	defer c.Close()
	pins, err := c.Pins(context.Background())
	require.NoError(t, err)
	require.Len(t, pins, 1)
	require.Equal(t, want, pins[0].ResourceIDs)
	refs, err := c.Refs(context.Background(), want[0])
	require.NoError(t, err)
	require.Contains(t, refs.Nodes, "pin/web", "the pin holds the blob")
	require.NotContains(t, refs.Nodes, "prefetch-test", "the prefetch's node is forgotten")
	_, err = os.Stat(filepath.Join(e.root, ".sharedcontent", "pins", "web.json"))
	require.NoError(t, err, "the pin's copy is in the root")
}
