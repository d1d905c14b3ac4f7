package check

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readme returns the repository's README.md.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	return string(b)
}

// TestReadmeContainerdConfig: the containerd configuration README.md shows
// a reader to copy is deploy/containerd-config.toml, byte for byte (the
// file `sharedcontentctl doctor` is tested on), not a part of it.
func TestReadmeContainerdConfig(t *testing.T) {
	s := readme(t)
	_, section, ok := strings.Cut(s, "\n## containerd configuration\n")
	require.True(t, ok, "README.md has a section \"containerd configuration\"")
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "\n```toml\n")
	require.True(t, ok, "the section shows a ```toml block")
	block, _, ok = strings.Cut(block, "```\n")
	require.True(t, ok)
	want, err := os.ReadFile("../containerd-config.toml")
	require.NoError(t, err)
	require.Equal(t, string(want), block, "README.md's containerd configuration is deploy/containerd-config.toml")
}

// TestReadmeEtcdFilesAsOperations: the etcd client certificate files
// README.md's HA quick start names are the ones docs/operations.md and the
// systemd environment file name.
func TestReadmeEtcdFilesAsOperations(t *testing.T) {
	files := regexp.MustCompile(`/etc/sharedcontent/etcd[-\w.]*`)
	got := files.FindAllString(readme(t), -1)
	require.NotEmpty(t, got, "README.md's HA quick start names etcd's certificate files")
	for _, other := range []string{"../../docs/operations.md", "../systemd/lockserver-replica.env.example"} {
		b, err := os.ReadFile(other)
		require.NoError(t, err)
		for _, f := range got {
			require.Contains(t, string(b), f, "README.md names %s; %s does not", f, other)
		}
	}
}
