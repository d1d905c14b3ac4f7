package plugin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/logbuf"
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

// TestBusyWritesAreNotErrors: a Write refused as Unavailable (a blob being
// downloaded by another node; containerd retries) is not logged as an
// error, while other Write failures still are.
func TestBusyWritesAreNotErrors(t *testing.T) {
	out := logbuf.Capture(t)

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

// abortFailingStore answers every Abort with the configured error. Its
// Writer opens even for a blob that exists (as a follower does).
type abortFailingStore struct {
	content.Store
	err error
}

func (s abortFailingStore) Abort(context.Context, string) error { return s.err }

func (s abortFailingStore) Writer(ctx context.Context, opts ...content.WriterOpt) (content.Writer, error) {
	var wo content.WriterOpts
	for _, o := range opts {
		if err := o(&wo); err != nil {
			return nil, err
		}
	}
	return s.Store.Writer(ctx, content.WithRef(wo.Ref))
}

// TestFollowerAbortIsNotAnError: when the content server finds a Write's
// blob already committed it aborts the ref; a follower has no ingest
// there, and that NotFound is not logged as an error. Other failed aborts
// still are.
func TestFollowerAbortIsNotAnError(t *testing.T) {
	out := logbuf.Capture(t)

	for _, tc := range []struct {
		err    error
		logged bool
	}{
		{fmt.Errorf("no ingest: %w", errdefs.ErrNotFound), false},
		{fmt.Errorf("broken: %w", errdefs.ErrFailedPrecondition), true},
	} {
		dir := t.TempDir()
		cs, err := local.NewStore(filepath.Join(dir, "root"))
		require.NoError(t, err)
		data := []byte("committed elsewhere")
		desc := ocispec.Descriptor{Digest: digest.FromBytes(data), Size: int64(len(data))}
		require.NoError(t, content.WriteBlob(context.Background(), cs, "first", bytes.NewReader(data), desc))
		address := filepath.Join(dir, "sc.sock")
		srv, err := plugin.Listen(address, abortFailingStore{Store: cs, err: tc.err})
		require.NoError(t, err)
		go srv.Serve(context.Background())

		_, err = dial(t, address).Writer(context.Background(), content.WithRef("layer-x"), content.WithDescriptor(desc))
		require.True(t, errdefs.IsAlreadyExists(err), "the blob exists: %v", err)
		srv.Stop(context.Background())
		require.Equal(t, tc.logged, bytes.Contains([]byte(out.String()), []byte("failed to abort write")), "log: %s", out.String())
	}
}
