package plugin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/plugin"
)

// refusingStore refuses every Writer with the configured error.
type refusingStore struct {
	content.Store
	err error
}

func (s refusingStore) Writer(context.Context, ...content.WriterOpt) (content.Writer, error) {
	return nil, s.err
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBusyWritesAreNotErrors: a Write refused as Unavailable (a blob being
// downloaded by another node; containerd retries) is not logged as an
// error, while other Write failures still are.
func TestBusyWritesAreNotErrors(t *testing.T) {
	var out syncBuffer
	orig := log.L.Logger.Out
	log.L.Logger.SetOutput(&out)
	defer log.L.Logger.SetOutput(orig)

	for _, tc := range []struct {
		err    error
		logged bool
	}{
		{fmt.Errorf("busy: %w", errdefs.ErrUnavailable), false},
		{fmt.Errorf("broken: %w", errdefs.ErrFailedPrecondition), true},
	} {
		dir := t.TempDir()
		cs, err := local.NewStore(filepath.Join(dir, "root"))
		require.NoError(t, err)
		address := filepath.Join(dir, "sc.sock")
		srv, err := plugin.Listen(address, refusingStore{Store: cs, err: tc.err})
		require.NoError(t, err)
		go srv.Serve(context.Background())

		_, err = dial(t, address).Writer(context.Background(), content.WithRef("layer-x"))
		require.Error(t, err)
		require.True(t, errors.Is(err, errdefs.ErrUnavailable) == !tc.logged, "error class crosses gRPC: %v", err)
		srv.Stop(context.Background())
		require.Equal(t, tc.logged, bytes.Contains([]byte(out.String()), []byte("Write failed")), "log: %s", out.String())
	}
}
