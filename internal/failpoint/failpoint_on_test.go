//go:build failpoints

package failpoint

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExit runs this test binary again with a point armed "exit": it must
// stop at the point with ExitCode, before the line after it runs, naming
// the point on stderr.
func TestExit(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Inject(StoreSyncSnapshot) // not armed: nothing happens
		Inject(StoreWriteAfterRename)
		os.Stdout.WriteString("after the point\n")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestExit$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", EnvVar+"="+StoreWriteAfterRename+"=exit")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "want an exit status, got %v: %s", err, out)
	require.Equal(t, ExitCode, exit.ExitCode(), "%s", out)
	require.Contains(t, string(out), "failpoint "+StoreWriteAfterRename+": exit")
	require.NotContains(t, string(out), "after the point")
}
