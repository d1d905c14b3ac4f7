package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"
)

// fakeBins writes stand-ins for the binaries of each platform under dir;
// their contents name the platform.
func fakeBins(t *testing.T, dir string, platforms ...string) {
	t.Helper()
	for _, p := range platforms {
		d := filepath.Join(dir, strings.ReplaceAll(p, "/", "_"))
		require.NoError(t, os.MkdirAll(d, 0o755))
		for _, b := range binaries {
			require.NoError(t, os.WriteFile(filepath.Join(d, b), []byte(b+" for "+p), 0o700))
		}
	}
}

func buildArgs(bin, out string) []string {
	return []string{"build", "-bin", bin, "-out", out, "-name", "example.test/sharedcontent:v1",
		"-epoch", "1700000000", "-version", "v1", "-revision", "abc", "-source", "https://example.test/sc"}
}

// Two builds of one input are one file, byte for byte, though the files
// they read have other times and modes.
func TestBuildIsReproducible(t *testing.T) {
	bin := t.TempDir()
	fakeBins(t, bin, "linux/amd64", "linux/arm64")
	out1 := filepath.Join(t.TempDir(), "a.tar")
	require.NoError(t, run(buildArgs(bin, out1)))
	// Other mtimes and modes on the inputs change nothing.
	for _, p := range []string{"linux_amd64", "linux_arm64"} {
		f := filepath.Join(bin, p, binaries[0])
		require.NoError(t, os.Chmod(f, 0o755))
		require.NoError(t, os.Chtimes(f, timeZero, timeZero))
	}
	out2 := filepath.Join(t.TempDir(), "b.tar")
	require.NoError(t, run(buildArgs(bin, out2)))
	a, err := os.ReadFile(out1)
	require.NoError(t, err)
	b, err := os.ReadFile(out2)
	require.NoError(t, err)
	require.Equal(t, a, b)

	// Another epoch is another image.
	out3 := filepath.Join(t.TempDir(), "c.tar")
	args := buildArgs(bin, out3)
	args[8] = "1700000001"
	require.NoError(t, run(args))
	c, err := os.ReadFile(out3)
	require.NoError(t, err)
	require.NotEqual(t, a, c)
}

// The index holds one image per platform with that platform's binaries,
// the labels, the non-root user and the coordinator as entrypoint; push
// sends it to a registry under the same digest.
func TestBuildAndPush(t *testing.T) {
	bin := t.TempDir()
	fakeBins(t, bin, "linux/amd64", "linux/arm64")
	out := filepath.Join(t.TempDir(), "image.tar")
	require.NoError(t, run(buildArgs(bin, out)))

	// Every tar entry is 0:0 at the epoch.
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.Equal(t, int64(1700000000), h.ModTime.Unix(), h.Name)
		require.Zero(t, h.Uid+h.Gid, h.Name)
		names = append(names, h.Name)
	}
	require.Contains(t, names, "oci-layout")
	require.Contains(t, names, "index.json")
	outer, err := layout.ImageIndexFromPath(unpack(t, out))
	require.NoError(t, err)
	om, err := outer.IndexManifest()
	require.NoError(t, err)
	require.Len(t, om.Manifests, 1)
	require.Equal(t, map[string]string{annRefName: "v1", annContainerdName: "example.test/sharedcontent:v1"}, om.Manifests[0].Annotations)

	idx, err := readArchive(out, t.TempDir())
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, m.Manifests, 2)
	require.Equal(t, "abc", m.Annotations[annRevision])
	for _, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		require.NoError(t, err)
		cf, err := img.ConfigFile()
		require.NoError(t, err)
		require.Equal(t, desc.Platform.Architecture, cf.Architecture)
		require.Equal(t, nonRootUser, cf.Config.User)
		require.Equal(t, []string{"/usr/local/bin/sharedcontent-lockserver"}, cf.Config.Entrypoint)
		require.Equal(t, map[string]string{
			annSource: "https://example.test/sc", annRevision: "abc", annVersion: "v1",
			annCreated: "2023-11-14T22:13:20Z", annTitle: "sharedcontent",
		}, cf.Config.Labels)
		files := layerFiles(t, img)
		require.Equal(t, "sharedcontentctl for linux/"+cf.Architecture, files["usr/local/bin/sharedcontentctl"])
		require.Len(t, files, len(binaries))
	}

	srv := httptest.NewServer(registry.New(registry.Logger(discardLogger())))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	ref := u.Host + "/sharedcontent:v1"
	require.NoError(t, run([]string{"push", "-insecure", "-in", out, ref}))
	r, err := name.ParseReference(ref, name.Insecure)
	require.NoError(t, err)
	pushed, err := remote.Index(r)
	require.NoError(t, err)
	want, err := idx.Digest()
	require.NoError(t, err)
	got, err := pushed.Digest()
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// Bad input is refused before anything is written.
func TestBuildRefusesBadInput(t *testing.T) {
	bin := t.TempDir()
	fakeBins(t, bin, "linux/amd64") // no arm64
	out := filepath.Join(t.TempDir(), "image.tar")
	require.ErrorContains(t, run(buildArgs(bin, out)), "linux/arm64")
	args := buildArgs(bin, out)
	args[8] = "yesterday"
	require.ErrorContains(t, run(args), "-epoch")
	args = buildArgs(bin, out)
	args[6] = "no-tag"
	require.ErrorContains(t, run(append(args, "-platforms", "linux/amd64")), "NAME:TAG")
	require.ErrorContains(t, run(append(buildArgs(bin, out), "-platforms", "amd64")), "OS/ARCH")
	_, err := os.Stat(out)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// layerFiles maps the regular files of img's layers to their contents.
func layerFiles(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	require.NoError(t, err)
	files := map[string]string{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		require.NoError(t, err)
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			if h.Typeflag == tar.TypeReg {
				var b bytes.Buffer
				_, err := io.Copy(&b, tr)
				require.NoError(t, err)
				files[h.Name] = b.String()
			}
		}
		require.NoError(t, rc.Close())
	}
	return files
}

func TestFullName(t *testing.T) {
	for ref, want := range map[string]string{
		"sharedcontent:v1":                     "docker.io/library/sharedcontent:v1",
		"org/sharedcontent:v1":                 "docker.io/org/sharedcontent:v1",
		"docker.io/sharedcontent:v1":           "docker.io/library/sharedcontent:v1",
		"registry.example/sc/sharedcontent:v1": "registry.example/sc/sharedcontent:v1",
		"localhost:5000/sharedcontent:v1":      "localhost:5000/sharedcontent:v1",
		"localhost/sharedcontent:v1":           "localhost/sharedcontent:v1",
	} {
		require.Equal(t, want, fullName(ref), ref)
	}
}

// unpack unpacks an OCI layout tarball into a new directory.
func unpack(t *testing.T, file string) string {
	t.Helper()
	dir := t.TempDir()
	_, err := readArchive(file, dir)
	require.NoError(t, err)
	return dir
}
