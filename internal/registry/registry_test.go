package registry

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"

	testregistry "github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// startRegistry serves a registry with an image until the test ends.
func startRegistry(t *testing.T, opts ...testregistry.Option) (*testregistry.Registry, testregistry.Image) {
	t.Helper()
	r, err := testregistry.Start(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	img, err := r.PushRandom(context.Background(), "test/img:v1", 2, 4<<10)
	require.NoError(t, err)
	r.ResetCounters()
	return r, img
}

// noDockerConfig points the docker config at an empty directory.
func noDockerConfig(t *testing.T) string {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("DOCKER_CONFIG", filepath.Join(dir, ".docker"))
	t.Setenv("REGISTRY_AUTH_FILE", "")
	t.Setenv("XDG_RUNTIME_DIR", dir)
	return filepath.Join(dir, ".docker")
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"alpine":                        "docker.io/library/alpine:latest",
		"docker.io/library/alpine:3.20": "docker.io/library/alpine:3.20",
		"127.0.0.1:5000/a/b:v1":         "127.0.0.1:5000/a/b:v1",
		"ghcr.io/x/y@sha256:" + fmt.Sprintf("%064x", 1): "ghcr.io/x/y@sha256:" + fmt.Sprintf("%064x", 1),
	} {
		got, err := Normalize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := Normalize("UPPER/case:v1")
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	require.ErrorContains(t, err, `"UPPER/case:v1"`)
}

// TestResolveWithUser: a registry that asks for basic auth resolves with
// --user's credentials, and refuses without them or with wrong ones.
func TestResolveWithUser(t *testing.T) {
	noDockerConfig(t)
	r, img := startRegistry(t, testregistry.WithBasicAuth("alice", "s3cret"))
	ctx := context.Background()

	_, err := ResolveDigest(ctx, img.Ref, Options{})
	require.Error(t, err, "anonymous")
	_, err = ResolveDigest(ctx, img.Ref, Options{User: "alice:wrong"})
	require.Error(t, err, "a wrong password")
	desc, err := ResolveDigest(ctx, img.Ref, Options{User: "alice:s3cret"})
	require.NoError(t, err)
	require.Equal(t, img.Manifest.Digest.String(), desc.Digest.String())
	require.Equal(t, img.Manifest.Size, desc.Size)
	require.Zero(t, r.BlobBytes(), "resolving downloads no blob")

	_, err = ResolveDigest(ctx, img.Ref, Options{User: ":nouser"})
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	require.ErrorContains(t, err, "--user")
}

// TestResolveWithDockerConfig: without --user, the credentials come from
// the docker config ($DOCKER_CONFIG/config.json), by host.
func TestResolveWithDockerConfig(t *testing.T) {
	dir := noDockerConfig(t)
	_, img := startRegistry(t, testregistry.WithBasicAuth("bob", "hunter2"))
	ctx := context.Background()
	host, _, _ := strings.Cut(img.Ref, "/")

	_, err := ResolveDigest(ctx, img.Ref, Options{})
	require.Error(t, err, "no docker config: anonymous")

	require.NoError(t, os.MkdirAll(dir, 0o700))
	auth := base64.StdEncoding.EncodeToString([]byte("bob:hunter2"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"),
		fmt.Appendf(nil, `{"auths": {%q: {"auth": %q}}}`, host, auth), 0o600))
	desc, err := ResolveDigest(ctx, img.Ref, Options{})
	require.NoError(t, err)
	require.Equal(t, img.Manifest.Digest.String(), desc.Digest.String())

	// --user wins over the docker config.
	_, err = ResolveDigest(ctx, img.Ref, Options{User: "bob:wrong"})
	require.Error(t, err)
}

// TestResolveThroughMirror: a hosts.toml in the hosts directory sends the
// resolution of an upstream host to its mirror, as containerd reads it;
// the upstream here does not even exist.
func TestResolveThroughMirror(t *testing.T) {
	noDockerConfig(t)
	mirror, img := startRegistry(t)
	ctx := context.Background()
	const upstream = "upstream.invalid"
	hosts := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(hosts, upstream), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(hosts, upstream, "hosts.toml"), fmt.Appendf(nil,
		"server = \"https://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", upstream, mirror.Host), 0o644))
	ref := upstream + "/test/img:v1"

	desc, err := ResolveDigest(ctx, ref, Options{HostsDir: hosts})
	require.NoError(t, err)
	require.Equal(t, img.Manifest.Digest.String(), desc.Digest.String())
	_, err = ResolveDigest(ctx, ref, Options{})
	require.Error(t, err, "without the hosts directory the upstream is asked, and it does not exist")
}
