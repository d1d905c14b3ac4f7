package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/cmd/internal/notifytest"
	"github.com/sharedcontent/sharedcontent/internal/version"
)

// TestRunNotifiesReady (docs/operations.md "systemd"): under systemd (Type=notify) the lock
// server sends READY=1, with the address it serves in STATUS, once its
// listener is bound and served; it sends STOPPING=1 on SIGTERM.
func TestRunNotifiesReady(t *testing.T) {
	notes := notifytest.Listen(t)
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data")})
	}()

	msg := notifytest.Wait(t, notes, "READY", time.Minute)
	require.Equal(t, "1", msg["READY"])
	addr, ok := strings.CutPrefix(msg["STATUS"], "serving on ")
	require.True(t, ok, "STATUS names the address: %q", msg["STATUS"])
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/healthz")
	require.NoError(t, err, "the API answers when READY=1 arrives")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "ok\n", string(body))
	require.Equal(t, version.Get().String(), resp.Header.Get(version.Header), "/healthz names the build")
	resp, err = client.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(body), `sharedcontent_build_info{goversion="`+version.Get().GoVersion+`",revision="`+version.Get().Revision+`",version="`+version.Get().Version+`"} 1`)

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	notifytest.Wait(t, notes, "STOPPING", time.Minute)
	require.NoError(t, <-done)
}

// TestRunLogsIdentity (docs/design.md §9): the start-up log names the identity
// mode in force: node tokens here, where it used to say auth=false.
func TestRunLogsIdentity(t *testing.T) {
	old := logrus.StandardLogger().ReplaceHooks(make(logrus.LevelHooks))
	t.Cleanup(func() { logrus.StandardLogger().ReplaceHooks(old) })
	hook := logtest.NewGlobal()
	dir := t.TempDir()
	tokens, admin := filepath.Join(dir, "nodes"), filepath.Join(dir, "admin")
	require.NoError(t, os.WriteFile(tokens, []byte("n1 tok1\n"), 0o600))
	require.NoError(t, os.WriteFile(admin, []byte("adm\n"), 0o600))
	notes := notifytest.Listen(t)
	done := make(chan error, 1)
	go func() {
		done <- run([]string{"--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"),
			"--node-tokens-file", tokens, "--admin-token-file", admin})
	}()
	notifytest.Wait(t, notes, "READY", time.Minute)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	require.NoError(t, <-done)

	var serving *logrus.Entry
	for _, e := range hook.AllEntries() {
		if e.Message == "sharedcontent-lockserver serving" {
			serving = e
		}
	}
	require.NotNil(t, serving, "the start-up line was logged")
	require.Equal(t, "node-tokens", serving.Data["auth"])
}
