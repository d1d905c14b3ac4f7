package lockservertest

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

// ServeHandler serves h (on its own HTTPServer) on a free loopback port
// until the test ends, then drains it and shuts it down, and returns its
// base URL. wrap, when set, wraps the server's handler, for a test that
// delays or rewrites requests. Use Start for a full server; this is for a
// Handler built around a Coordinator of NewCoordinator.
func ServeHandler(t testing.TB, h *httpserver.Handler, wrap func(fasthttp.RequestHandler) fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", DefaultAddr)
	require.NoError(t, err)
	srv := h.HTTPServer()
	if wrap != nil {
		srv.Handler = wrap(srv.Handler)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
		defer cancel()
		h.Drain()
		require.NoError(t, srv.ShutdownWithContext(ctx))
		require.NoError(t, <-done)
	})
	return "http://" + ln.Addr().String()
}
