package httpserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// openServer opens a Server on a temp dir, lets mutate change its HTTP
// server before it serves, and serves it on loopback until the test ends.
func openServer(t *testing.T, cfg Config, mutate func(*Server)) (*Server, string) {
	t.Helper()
	cfg.Config = lockserver.DefaultConfig()
	cfg.DataDir = t.TempDir()
	s, err := Open(cfg)
	require.NoError(t, err)
	if mutate != nil {
		mutate(s)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, s.Shutdown(context.Background()))
		require.NoError(t, <-done)
	})
	return s, ln.Addr().String()
}

// openConns is the number of connections s has accepted and not closed.
func openConns(s *Server) int {
	s.mu.Lock()
	served := s.served
	s.mu.Unlock()
	n := 0
	for _, gl := range served {
		gl.mu.Lock()
		n += len(gl.open)
		gl.mu.Unlock()
	}
	return n
}

// idleConns is how many connections s has marked idle. fasthttp marks a
// connection idle after it has flushed the response, so a client can read
// the response first: tests that depend on which connection is idle wait
// for this count.
func idleConns(s *Server) int {
	s.mu.Lock()
	served := s.served
	s.mu.Unlock()
	n := 0
	for _, gl := range served {
		gl.mu.Lock()
		for tc := range gl.open {
			if fasthttp.ConnState(tc.state.Load()) == fasthttp.StateIdle {
				n++
			}
		}
		gl.mu.Unlock()
	}
	return n
}

// rawGet sends GET path on c and reads the answer.
func rawGet(t *testing.T, c net.Conn, path string) (*http.Response, string) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// TestAcceptSurvivesDescriptorExhaustion (docs/design.md §10.3): when the
// process runs out of descriptors, the failed accept is retried after a
// backoff instead of ending Serve, and once descriptors are free again
// the waiting connection is served, and so are new ones.
func TestAcceptSurvivesDescriptorExhaustion(t *testing.T) {
	// Limits above the descriptors, so that accept itself fails.
	s, addr := openServer(t, Config{Limits: ConnLimits{Total: 1 << 20, PerIP: 1 << 20}}, nil)

	var orig syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig))
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	low := orig
	low.Cur = uint64(len(fds) + 256)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) })

	// A flood of idle connections, then every descriptor left.
	var conns []net.Conn
	var files []*os.File
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
		for _, f := range files {
			f.Close()
		}
	})
	for range 100 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	// The server holds a descriptor for each once it has accepted it: an
	// accept still to come would take the descriptor freed below.
	require.Eventually(t, func() bool { return openConns(s) == len(conns) }, 10*time.Second, 5*time.Millisecond)
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			require.ErrorIs(t, err, syscall.EMFILE)
			break
		}
		files = append(files, f)
	}
	// One descriptor for one more client: the server has none left to
	// accept it with.
	files[len(files)-1].Close()
	files = files[:len(files)-1]
	last, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	conns = append(conns, last)
	require.Eventually(t, func() bool { return testutil.ToFloat64(s.metrics.acceptErrors) > 0 },
		10*time.Second, 5*time.Millisecond, "the accept did not fail: the test did not exhaust descriptors")

	for _, f := range files {
		f.Close()
	}
	files = nil
	resp, body := rawGet(t, last, "/healthz")
	require.Equal(t, http.StatusOK, resp.StatusCode, "the connection that waited is served: %s", body)
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	resp, body = rawGet(t, c, "/healthz")
	require.Equal(t, http.StatusOK, resp.StatusCode, "a new connection is served: %s", body)
}

// TestConnectionLimits (docs/design.md §10.3): connections over the
// per-IP or the total limit are answered 503 with Retry-After (and the
// cluster and protocol headers of every answer); another IP
// is still served below the total; and once connections close, new ones
// are served again.
func TestConnectionLimits(t *testing.T) {
	s, addr := openServer(t, Config{Limits: ConnLimits{Total: 5, PerIP: 3}}, nil)
	dialFrom := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	refused := func(c net.Conn, reason string) {
		t.Helper()
		resp, body := rawGet(t, c, "/healthz")
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		require.Contains(t, body, reason+" limit")
		require.Contains(t, body, `"code":"unavailable"`)
		// The headers every answer carries (docs/design.md §3.8).
		cl := s.Coordinator.Cluster()
		require.Equal(t, cl.ClusterID+"/"+strconv.FormatUint(cl.Epoch, 10), resp.Header.Get(api.ClusterHeader))
		require.Equal(t, api.ProtocolVersion, resp.Header.Get(api.ProtocolHeader))
	}
	served := func(c net.Conn) {
		t.Helper()
		resp, body := rawGet(t, c, "/healthz")
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
	}

	a := []net.Conn{dialFrom("127.0.0.1"), dialFrom("127.0.0.1"), dialFrom("127.0.0.1")}
	for _, c := range a {
		served(c) // also makes sure each was accepted before the next dial
	}
	refused(dialFrom("127.0.0.1"), "per_ip")
	b := []net.Conn{dialFrom("127.0.0.2"), dialFrom("127.0.0.2")}
	for _, c := range b {
		served(c)
	}
	refused(dialFrom("127.0.0.3"), "total")
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.rejectedVec.WithLabelValues("per_ip")))
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.rejectedVec.WithLabelValues("total")))

	a[0].Close()
	require.Eventually(t, func() bool {
		c := dialFrom("127.0.0.1")
		resp, _ := rawGet(t, c, "/healthz")
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond, "served again once below the limit")
}

// TestSilentConnectionGetsNoAnswer (docs/design.md §10.3): a connection
// that sends nothing within the read timeout is closed without an
// unsolicited 400.
func TestSilentConnectionGetsNoAnswer(t *testing.T) {
	_, addr := openServer(t, Config{}, func(s *Server) { s.handler.HTTPServer().ReadTimeout = 100 * time.Millisecond })
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	b, err := io.ReadAll(c)
	require.NoError(t, err, "the server closes the connection")
	require.Empty(t, string(b), "the server wrote to a connection that sent nothing")
}

// TestShutdownClosesSilentConnections (docs/design.md §10.3): shutting down
// does not wait for a connection that never sent a request (fasthttp
// would wait 5 s for it), nor for one idle between requests.
func TestShutdownClosesSilentConnections(t *testing.T) {
	cfg := Config{Config: lockserver.DefaultConfig(), DataDir: t.TempDir()}
	s, err := Open(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	silent, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer silent.Close()
	idle, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer idle.Close()
	resp, _ := rawGet(t, idle, "/healthz")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// The silent connection is accepted once a request on a later one is
	// served (one accept loop, in order).
	later, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	resp, _ = rawGet(t, later, "/healthz")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	later.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx), "shutdown waited for connections that have no request")
	require.NoError(t, <-done)
	_, err = silent.Read(make([]byte, 1))
	require.True(t, errors.Is(err, io.EOF) || strings.Contains(err.Error(), "reset"), "the silent connection is closed: %v", err)
}
