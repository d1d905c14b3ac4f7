package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/version"
)

// TestVersionFlag: --version prints one line and stops the command (as
// --help does); the environment variable and the TOML key do not.
func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	versionOut = &out
	t.Cleanup(func() { versionOut = os.Stdout })
	fs, _, _, _, _ := newFlags()
	DefineVersion(fs)
	require.ErrorIs(t, Parse(fs, []string{"--version", "--shards", "4"}), flag.ErrHelp)
	require.Equal(t, "t "+version.Get().String()+"\n", out.String())

	out.Reset()
	fs, _, _, _, _ = newFlags()
	DefineVersion(fs)
	t.Setenv(EnvName(VersionFlag), "true")
	require.NoError(t, Parse(fs, nil), "SHAREDCONTENT_VERSION is not --version")
	require.Empty(t, out.String())

	path := filepath.Join(t.TempDir(), "c.toml")
	require.NoError(t, os.WriteFile(path, []byte("version = true\n"), 0o600))
	fs, _, _, _, _ = newFlags()
	DefineVersion(fs)
	require.ErrorContains(t, Parse(fs, []string{"--config", path}), `unknown key "version"`)
	require.Empty(t, out.String())
}
