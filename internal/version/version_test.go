package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestResolve(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	vcs := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	for _, tc := range []struct {
		name              string
		version, revision string
		bi                *debug.BuildInfo
		want              Info
	}{
		{"linker wins", "v1.2.3-4-gabc", "abc", vcs("true"), Info{"v1.2.3-4-gabc", "abc", "go1.99"}},
		{"vcs stamp", "", "", vcs("false"), Info{"0123456", rev, "go1.99"}},
		{"vcs stamp of a modified tree", "", "", vcs("true"), Info{"0123456-dirty", rev, "go1.99"}},
		{"go install of a module version", "", "", &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v0.4.0"}},
			Info{"v0.4.0", UnknownCommit, "go1.99"}},
		// CI builds with GOFLAGS=-buildvcs=false and no -ldflags: nothing known.
		{"nothing recorded", "", "", &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"}},
			Info{Dev, UnknownCommit, "go1.99"}},
		{"no build info", "", "", nil, Info{Dev, UnknownCommit, runtime.Version()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, resolve(tc.version, tc.revision, tc.bi))
		})
	}
	require.Equal(t, "v1 (revision abc, go1.99)", Info{"v1", "abc", "go1.99"}.String())
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector())
	i := Get()
	want := "# HELP sharedcontent_build_info The running build of sharedcontent: always 1; its version, revision and Go version are the labels.\n" +
		"# TYPE sharedcontent_build_info gauge\n" +
		`sharedcontent_build_info{goversion="` + i.GoVersion + `",revision="` + i.Revision + `",version="` + i.Version + "\"} 1\n"
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), MetricName))
}

// TestLinkerStamp builds a binary as the Makefile does (-ldflags -X) and
// one as CI's plain `go build` with -buildvcs=false, and runs both.
func TestLinkerStamp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	dir := t.TempDir()
	build := func(name string, args ...string) []string {
		t.Helper()
		bin := filepath.Join(dir, name)
		cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, args...), "./testdata/printversion")...)
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		out, err = exec.Command(bin).Output()
		require.NoError(t, err)
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	const pkg = "github.com/sharedcontent/sharedcontent/internal/version"
	stamped := build("stamped", "-ldflags", "-X "+pkg+".version=v9.8.7-1-gfeed -X "+pkg+".revision=feedface")
	require.Equal(t, []string{"v9.8.7-1-gfeed", "feedface", runtime.Version()}, stamped)
	plain := build("plain")
	require.Equal(t, []string{Dev, UnknownCommit, runtime.Version()}, plain)
}
