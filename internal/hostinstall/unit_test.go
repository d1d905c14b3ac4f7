package hostinstall

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// directives returns a unit's "Key=Value" lines by section, comments
// dropped.
func directives(unit string) map[string][]string {
	out := map[string][]string{}
	section := ""
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		default:
			out[section] = append(out[section], line)
		}
	}
	return out
}

// TestUnitMatchesDeploySystemd: the installed unit is
// deploy/systemd/containerd-sharedcontent.service but for where its binary
// and environment file are, and that containerd.service wants it too.
func TestUnitMatchesDeploySystemd(t *testing.T) {
	b, err := os.ReadFile("../../deploy/systemd/containerd-sharedcontent.service")
	require.NoError(t, err)
	want := directives(string(b))
	got := directives(renderUnit())
	replace := map[string]string{
		"ExecStart=":       "ExecStart=" + BinaryPath,
		"EnvironmentFile=": "EnvironmentFile=" + EnvPath,
		"WantedBy=":        "WantedBy=multi-user.target containerd.service",
	}
	for section, lines := range want {
		for i, l := range lines {
			for prefix, v := range replace {
				if strings.HasPrefix(l, prefix) {
					lines[i] = v
				}
			}
		}
		require.Equal(t, lines, got[section], section)
	}
	require.Len(t, got, len(want))
}
