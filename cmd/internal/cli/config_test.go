package cli

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newFlags() (*flag.FlagSet, *string, *time.Duration, *bool, *int) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.String(ConfigFlag, "", "")
	listen := fs.String("listen", "default", "")
	ttl := fs.Duration("lease-ttl", time.Second, "")
	allow := fs.Bool("wait-by-default", true, "")
	shards := fs.Int("shards", 32, "")
	return fs, listen, ttl, allow, shards
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.toml")
	require.NoError(t, os.WriteFile(path, []byte("listen = \"file\"\nlease_ttl = \"7s\"\nwait_by_default = false\nshards = 8\n"), 0o600))

	fs, listen, ttl, allow, shards := newFlags()
	t.Setenv("SHAREDCONTENT_LEASE_TTL", "9s")
	require.NoError(t, Parse(fs, []string{"--config", path, "--shards", "4"}))
	require.Equal(t, "file", *listen, "file over default")
	require.Equal(t, 9*time.Second, *ttl, "environment over file")
	require.False(t, *allow)
	require.Equal(t, 4, *shards, "command line over everything")
}

func TestConfigFromEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.toml")
	require.NoError(t, os.WriteFile(path, []byte("listen = \"file\"\n"), 0o600))
	t.Setenv("SHAREDCONTENT_CONFIG", path)
	fs, listen, _, _, _ := newFlags()
	require.NoError(t, Parse(fs, nil))
	require.Equal(t, "file", *listen)
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown key": "nope = 1\n",
		"bad value":   "lease_ttl = \"soon\"\n",
		"table":       "[listen]\nx = 1\n",
		"malformed":   "listen = \n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".toml")
			require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
			fs, _, _, _, _ := newFlags()
			err := Parse(fs, []string{"--config", path})
			require.Error(t, err)
			require.Contains(t, err.Error(), path)
		})
	}
	fs, _, _, _, _ := newFlags()
	t.Setenv("SHAREDCONTENT_SHARDS", "many")
	err := Parse(fs, nil)
	require.ErrorContains(t, err, "SHAREDCONTENT_SHARDS")
}
