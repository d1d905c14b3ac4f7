package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseWaitByDefault: --wait-by-default sets whether a lock request
// that does not say is queued; its old name --allow-multi-node-download
// still works, on the command line, as an environment variable and as a
// TOML key, and the new name wins where both are given.
func TestParseWaitByDefault(t *testing.T) {
	o, err := parse(nil)
	require.NoError(t, err)
	require.True(t, o.cfg.WaitByDefault, "queues by default")

	for _, args := range [][]string{
		{"--wait-by-default=false"},
		{"--allow-multi-node-download=false"},
		{"--allow-multi-node-download=true", "--wait-by-default=false"},
	} {
		o, err := parse(args)
		require.NoError(t, err, "%v", args)
		require.False(t, o.cfg.WaitByDefault, "%v", args)
	}

	config := filepath.Join(t.TempDir(), "lockserver.toml")
	require.NoError(t, os.WriteFile(config, []byte("allow_multi_node_download = false\n"), 0o600))
	o, err = parse([]string{"--config", config})
	require.NoError(t, err)
	require.False(t, o.cfg.WaitByDefault, "the old TOML key")

	t.Setenv("SHAREDCONTENT_ALLOW_MULTI_NODE_DOWNLOAD", "false")
	o, err = parse(nil)
	require.NoError(t, err)
	require.False(t, o.cfg.WaitByDefault, "the old environment variable")
	t.Setenv("SHAREDCONTENT_WAIT_BY_DEFAULT", "true")
	o, err = parse(nil)
	require.NoError(t, err)
	require.True(t, o.cfg.WaitByDefault, "the new variable wins")
}
