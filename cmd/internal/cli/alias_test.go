package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// aliased returns a flag set with --coordinator and its deprecated name
// --lock-server, and the buffer its notes go to.
func aliased() (*flag.FlagSet, *string, *bytes.Buffer) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var notes bytes.Buffer
	fs.SetOutput(&notes)
	fs.String(ConfigFlag, "", "")
	coordinator := fs.String("coordinator", "", "coordinator URL")
	Alias(fs, "lock-server", "coordinator")
	return fs, coordinator, &notes
}

func TestAlias(t *testing.T) {
	toml := func(body string) string {
		path := filepath.Join(t.TempDir(), "c.toml")
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		return path
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
		note string // "" when no deprecated name is used
	}{
		{name: "new flag", args: []string{"--coordinator", "http://new"}, want: "http://new"},
		{name: "old flag", args: []string{"--lock-server", "http://old"}, want: "http://old", note: "--lock-server is deprecated, use --coordinator"},
		{name: "both flags", args: []string{"--coordinator", "http://new", "--lock-server", "http://old"}, want: "http://new", note: "--lock-server is deprecated"},
		{name: "new env", env: map[string]string{"SHAREDCONTENT_COORDINATOR": "http://new"}, want: "http://new"},
		{name: "old env", env: map[string]string{"SHAREDCONTENT_LOCK_SERVER": "http://old"}, want: "http://old",
			note: "environment SHAREDCONTENT_LOCK_SERVER is deprecated, use environment SHAREDCONTENT_COORDINATOR"},
		{name: "both env", env: map[string]string{"SHAREDCONTENT_LOCK_SERVER": "http://old", "SHAREDCONTENT_COORDINATOR": "http://new"}, want: "http://new"},
		{name: "old env, new flag", args: []string{"--coordinator", "http://flag"}, env: map[string]string{"SHAREDCONTENT_LOCK_SERVER": "http://old"}, want: "http://flag"},
		{name: "old key", args: []string{"--config", toml("lock_server = \"http://old\"\n")}, want: "http://old",
			note: "config file key lock_server is deprecated, use config file key coordinator"},
		{name: "both keys", args: []string{"--config", toml("lock_server = \"http://old\"\ncoordinator = \"http://new\"\n")}, want: "http://new", note: "lock_server is deprecated"},
		{name: "old key, old env", args: []string{"--config", toml("lock_server = \"http://file\"\n")}, env: map[string]string{"SHAREDCONTENT_LOCK_SERVER": "http://env"}, want: "http://env", note: "deprecated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs, coordinator, notes := aliased()
			require.NoError(t, Parse(fs, tc.args))
			require.Equal(t, tc.want, *coordinator)
			if tc.note == "" {
				require.Empty(t, notes.String())
			} else {
				require.Contains(t, notes.String(), tc.note)
			}
		})
	}
}

func TestAliasUsage(t *testing.T) {
	fs, _, out := aliased()
	fs.Usage = Usage(fs, "usage: t")
	fs.Usage()
	require.Contains(t, out.String(), "--coordinator  [SHAREDCONTENT_COORDINATOR]")
	require.NotContains(t, out.String(), "--lock-server  [", "a deprecated name is not listed as a flag")
	require.Contains(t, out.String(), "Deprecated names, still accepted (also as environment variables and TOML keys): --lock-server (--coordinator)")
}
