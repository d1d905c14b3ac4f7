// Package notifytest receives systemd readiness notifications
// (sd_notify's NOTIFY_SOCKET datagrams) in the commands' tests.
package notifytest

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Listen creates a unixgram socket, points NOTIFY_SOCKET at it for the
// rest of the test, and returns the channel of the messages it receives
// (each a set of "KEY=VALUE" lines, as systemd reads them).
func Listen(t *testing.T) <-chan map[string]string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	ch := make(chan map[string]string, 16)
	go func() {
		defer close(ch)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return // closed by the cleanup
			}
			msg := map[string]string{}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					msg[k] = v
				}
			}
			ch <- msg
		}
	}()
	return ch
}

// Wait returns the first message that sets key, failing the test after
// timeout.
func Wait(t *testing.T, ch <-chan map[string]string, key string, timeout time.Duration) map[string]string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case msg, ok := <-ch:
			require.True(t, ok, "notify socket closed before %s", key)
			if _, ok := msg[key]; ok {
				return msg
			}
		case <-deadline:
			t.Fatalf("no %s notification within %v", key, timeout)
		}
	}
}
