package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	contentapi "github.com/containerd/containerd/api/services/content/v1"
	diffapi "github.com/containerd/containerd/api/services/diff/v1"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/services/content/contentserver"
	"github.com/containerd/log"
	"google.golang.org/grpc"
)

// MaxMsgSize bounds gRPC messages both ways. containerd's own default is
// 16 MiB; content writes stream in chunks far smaller.
const MaxMsgSize = 16 << 20

// Server is the content and diff gRPC services of one store on a unix
// socket.
type Server struct {
	grpc    *grpc.Server
	ln      net.Listener
	address string
	calls   *calls
}

// Listen creates the socket at address: its directory is created with mode
// 0700 and a stale socket left by a crashed daemon is removed. A socket
// that a live process still serves is not taken over.
func Listen(address string, cs content.Store) (*Server, error) {
	if address == "" {
		return nil, errors.New("plugin: socket address is required")
	}
	if err := os.MkdirAll(filepath.Dir(address), 0o700); err != nil {
		return nil, fmt.Errorf("plugin: socket directory: %w", err)
	}
	if err := removeStaleSocket(address); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", address)
	if err != nil {
		return nil, fmt.Errorf("plugin: listen on %s: %w", address, err)
	}
	if err := os.Chmod(address, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("plugin: socket mode: %w", err)
	}
	calls := newCalls()
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(MaxMsgSize), grpc.MaxSendMsgSize(MaxMsgSize),
		grpc.ForceServerCodecV2(newCodec()), grpc.StatsHandler(calls), grpc.ChainUnaryInterceptor(calls.unary),
		grpc.ChainStreamInterceptor(calls.stream, quietWrites(), aliasedWrites()))
	contentapi.RegisterContentServer(gs, contentserver.New(following(cs)))
	diffapi.RegisterDiffServer(gs, newDiffService(cs))
	return &Server{grpc: gs, ln: ln, address: address, calls: calls}, nil
}

func removeStaleSocket(address string) error {
	fi, err := os.Lstat(address)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("plugin: %w", err)
	case fi.Mode()&os.ModeSocket == 0:
		return fmt.Errorf("plugin: %s exists and is not a socket; refusing to remove it", address)
	}
	if c, err := net.Dial("unix", address); err == nil {
		c.Close()
		return fmt.Errorf("plugin: %s is served by another process", address)
	}
	if err := os.Remove(address); err != nil {
		return fmt.Errorf("plugin: removing stale socket: %w", err)
	}
	return nil
}

// Serve serves until Stop. It returns nil after a Stop.
func (s *Server) Serve(ctx context.Context) error {
	log.G(ctx).WithField("address", s.address).Info("serving content and diff APIs")
	err := s.grpc.Serve(s.ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Drain lets the pulls in flight finish before a Stop: the server keeps
// serving every call and returns once no call has been in flight for
// quiet (DrainQuiet), or with ctx's error when ctx ends first (drain.go
// says why it refuses nothing).
func (s *Server) Drain(ctx context.Context, quiet time.Duration) error {
	return s.calls.drain(ctx, quiet)
}

// Stop finishes the calls in flight, or cancels them when ctx ends first,
// and removes the socket.
func (s *Server) Stop(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
	os.Remove(s.address)
}
