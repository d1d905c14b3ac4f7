package check

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// unit is a systemd unit file: section → key → values (a key may repeat).
type unit map[string]map[string][]string

// parseUnit reads the subset of systemd.syntax(7) the units use: sections,
// Key=Value lines, comments; it refuses anything else.
func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok && section != "", "%s:%d: not Key=Value in a section: %q", path, n, line)
			k = strings.TrimSpace(k)
			u[section][k] = append(u[section][k], strings.TrimSpace(v))
		}
	}
	require.NoError(t, sc.Err())
	return u
}

// one returns the single value of section.key.
func (u unit) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	require.Len(t, v, 1, "[%s] %s=", section, key)
	return v[0]
}

// TestSystemdUnits: both units are Type=notify (the daemons send READY=1
// once they serve, cmd/*/main_test.go), restart on failure after a pause,
// and the plugin starts before containerd, which needs its socket.
func TestSystemdUnits(t *testing.T) {
	for _, name := range []string{"containerd-sharedcontent.service", "sharedcontent-lockserver.service"} {
		t.Run(name, func(t *testing.T) {
			u := parseUnit(t, filepath.Join("../systemd", name))
			require.Equal(t, "notify", u.one(t, "Service", "Type"))
			require.Contains(t, []string{"always", "on-failure"}, u.one(t, "Service", "Restart"))
			require.NotEmpty(t, u.one(t, "Service", "RestartSec"))
			bin := strings.TrimSuffix(name, ".service")
			require.Equal(t, "/usr/local/bin/"+bin, strings.Fields(u.one(t, "Service", "ExecStart"))[0])
			require.Contains(t, u["Install"]["WantedBy"], "multi-user.target")
			if bin == "containerd-sharedcontent" {
				var before []string
				for _, v := range u["Unit"]["Before"] {
					before = append(before, strings.Fields(v)...)
				}
				require.Contains(t, before, "containerd.service")
			}
		})
	}
}
