package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ctlErr runs sharedcontentctl and returns its output, its notes and its
// error.
func ctlErr(args ...string) (out, notes string, err error) {
	var o, n bytes.Buffer
	err = run(args, &o, &n)
	return o.String(), n.String(), err
}

// TestFlagsAfterCommand: the flags every command takes may follow the
// command, and its own flags may sit between or after its arguments.
func TestFlagsAfterCommand(t *testing.T) {
	server, root := setup(t)
	var r statusReport
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "status", "--coordinator", server, "-o", "json")), &r))
	require.Len(t, r.Members, 2)

	var refs refsReport
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "refs", used, "--coordinator", server, "--root", root, "-o", "json")), &refs))
	require.Equal(t, refsReport{Digest: used, Nodes: []string{"node-1", "node-2"}, File: "present", Size: 3000}, refs)
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "-o", "json", "refs", "--root", root, used, "--coordinator", server)), &refs))
	require.Equal(t, "present", refs.File, "flags on both sides of the argument")

	dry := ctl(t, "reap", "--coordinator", server, "--dry-run", "--root", root, "--reap-grace", "0s")
	require.Contains(t, dry, orphan)
	var nodes struct{ Nodes []struct{ NodeID string } }
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "node", "ls", "--coordinator", server, "-o", "json")), &nodes))
	require.Len(t, nodes.Nodes, 2)
}

func TestBadCommandLines(t *testing.T) {
	server, _ := setup(t)
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"not a digest", []string{"--coordinator", server, "refs", "notadigest"}, `"notadigest" is not a digest`},
		{"not a digest after flags", []string{"refs", "sha256:abc", "--coordinator", server}, `"sha256:abc" is not a digest`},
		{"unknown command", []string{"--coordinator", server, "stats"}, `unknown command "stats" (sharedcontentctl -h lists the commands)`},
		{"missing argument", []string{"--coordinator", server, "refs"}, `refs: want "refs DIGEST"`},
		{"extra argument", []string{"status", "now", "--coordinator", server}, `status: want "status"`},
		{"another command's flag", []string{"status", "--dry-run", "--coordinator", server}, "flag provided but not defined: -dry-run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, notes, err := ctlErr(tc.args...)
			require.ErrorContains(t, err, tc.err)
			require.Empty(t, out)
			require.NotContains(t, notes, "commands:", "no page of usage for a mistyped line")
		})
	}
}

func TestNoCommand(t *testing.T) {
	out, usage, err := ctlErr("--coordinator", "http://127.0.0.1:1")
	require.EqualError(t, err, "no command")
	require.Empty(t, out)
	require.Contains(t, usage, "commands:", "the usage lists them")
}

// TestNotACoordinator: pointed at a web server that is not a coordinator,
// sharedcontentctl says so in one line, instead of quoting its page.
func TestNotACoordinator(t *testing.T) {
	for _, status := range []int{http.StatusNotFound, http.StatusOK} {
		page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(status)
			_, _ = w.Write([]byte("<!DOCTYPE html><html><head><title>Welcome</title></head><body><h1>It works!</h1></body></html>\n"))
		}))
		t.Cleanup(page.Close)
		for _, args := range [][]string{{"status"}, {"node", "ls"}, {"refs", used}} {
			_, _, err := ctlErr(append([]string{"--coordinator", page.URL}, args...)...)
			require.EqualError(t, err, fmt.Sprintf("%s: not a sharedcontent coordinator (HTTP %d, text/html); point --coordinator at one", page.URL, status), "%v", args)
		}
	}
	// A coordinator older than the protocol header: its healthz says "ok",
	// its errors are JSON; its own error stays.
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = w.Write([]byte("ok\n"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error":"admin token required","code":"forbidden"}`))
	}))
	t.Cleanup(old.Close)
	_, _, err := ctlErr("--coordinator", old.URL, "status")
	require.ErrorContains(t, err, "admin token required")
	require.NotContains(t, err.Error(), "not a sharedcontent coordinator")

	// A failure against a real coordinator keeps its own error.
	server, _ := setup(t)
	root := t.TempDir()
	_, _, err = ctlErr("--coordinator", server, "cluster", "adopt", "--root", root)
	require.EqualError(t, err, "cluster adopt: "+root+" records no cluster (no node has used it yet); nothing to adopt")
}

// TestCoordinatorFlagNames: --coordinator and SHAREDCONTENT_COORDINATOR,
// and their deprecated names --lock-server and SHAREDCONTENT_LOCK_SERVER,
// with a note; the new name wins.
func TestCoordinatorFlagNames(t *testing.T) {
	server, _ := setup(t)
	const nowhere = "http://127.0.0.1:1"
	status := func(args ...string) (string, error) {
		out, notes, err := ctlErr(append(args, "-o", "json", "status")...)
		if err == nil {
			var r statusReport
			require.NoError(t, json.Unmarshal([]byte(out), &r))
			require.Len(t, r.Members, 2)
		}
		return notes, err
	}
	notes, err := status("--coordinator", server)
	require.NoError(t, err)
	require.Empty(t, notes)
	notes, err = status("--lock-server", server)
	require.NoError(t, err, "the old name still works")
	require.Equal(t, "sharedcontentctl: --lock-server is deprecated, use --coordinator\n", notes)
	_, err = status("--coordinator", server, "--lock-server", nowhere)
	require.NoError(t, err, "the new name wins")

	t.Setenv("SHAREDCONTENT_LOCK_SERVER", server)
	notes, err = status()
	require.NoError(t, err, "the old variable still works")
	require.Contains(t, notes, "SHAREDCONTENT_LOCK_SERVER is deprecated, use SHAREDCONTENT_COORDINATOR")
	t.Setenv("SHAREDCONTENT_LOCK_SERVER", nowhere)
	t.Setenv("SHAREDCONTENT_COORDINATOR", server)
	notes, err = status()
	require.NoError(t, err, "the new variable wins")
	require.Empty(t, notes)
}

func TestHelp(t *testing.T) {
	out, help, err := ctlErr("-h")
	require.NoError(t, err)
	require.Empty(t, out)
	require.Contains(t, help, "-coordinator value\n    \tcoordinator URL, or the comma-separated URLs of its replicas (env SHAREDCONTENT_COORDINATOR")
	require.Contains(t, help, "flags (before or after the command)")
}

// TestDoctorProblemsOnce: doctor's table says "N problems"; main does not
// say it again.
func TestDoctorProblemsOnce(t *testing.T) {
	n := newNode(t)
	out, _, err := ctlErr("--coordinator", n.coord.URL(), "doctor", "--containerd-config", filepath.Join(t.TempDir(), "missing.toml"))
	require.EqualError(t, err, "1 problem")
	require.True(t, isReported(err), "main prints no second line")
	require.Equal(t, 1, strings.Count(out, "1 problem"), "%s", out)
}
