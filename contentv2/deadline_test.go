package contentv2_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/testutil/freezefs"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// storageTimeout is node-1's --storage-timeout in the hung-root test.
// Every bound asserted is a multiple of it.
const storageTimeout = 500 * time.Millisecond

// hungRootEnv is two nodes on one root and a real coordinator: node-1
// sees the root through a freezable FUSE mount, node-2 directly.
type hungRootEnv struct {
	t      *testing.T
	ctx    context.Context
	coord  *lockservertest.Server
	fs     *freezefs.FS
	n1, n2 contentv2.Store
	reg1   *prometheus.Registry
}

func newHungRootEnv(t *testing.T) *hungRootEnv {
	backing := t.TempDir()
	e := &hungRootEnv{t: t, ctx: context.Background(), coord: lockservertest.Start(t), reg1: prometheus.NewRegistry()}
	e.fs = freezefs.Mount(t, backing)
	node := func(id, root string, opts ...contentv2.Option) contentv2.Store {
		c, err := lockclient.New(e.coord.URL(), lockclient.WithNodeID(id))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		cs, err := contentv2.NewStore(root, id, remote.New(c), append(opts, contentv2.WithStateDir(t.TempDir()))...)
		require.NoError(t, err)
		t.Cleanup(func() {
			e.fs.Thaw()
			cs.Close()
		})
		return cs
	}
	e.n1 = node("node-1", e.fs.Dir, contentv2.WithStorageTimeout(storageTimeout), contentv2.WithRegisterer(e.reg1))
	e.n2 = node("node-2", backing)
	return e
}

func (e *hungRootEnv) write(cs content.Store, s string) ocispec.Descriptor {
	data, desc := blob(s)
	require.NoError(e.t, e.healthy(func() error {
		return content.WriteBlob(e.ctx, cs, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc)
	}))
	return desc
}

// healthyTries bounds how often healthy makes one call.
const healthyTries = 5

// healthy runs call, a call on the stores while node-1's root is not
// frozen. node-1's storage deadline is short for a loaded machine (a
// write through the FUSE mount, race-built, can take longer): a call it
// fails with ErrRootStalled then is the rule working on a slow root, not
// the fault under test, and is made again once node-1 has seen its root
// answer, up to healthyTries times. Any other outcome is call's.
func (e *hungRootEnv) healthy(call func() error) error {
	e.t.Helper()
	for i := 1; ; i++ {
		err := call()
		if !errors.Is(err, contentv2.ErrRootStalled) || i == healthyTries {
			return err
		}
		e.t.Logf("a call on the unfrozen root met its deadline (a loaded machine), again once the root answers: %v", err)
		require.Eventually(e.t, func() bool { return e.n1.(contentv2.StallReporter).RootStalled() == nil },
			20*storageTimeout, storageTimeout/10, "node-1 never saw its unfrozen root answer")
	}
}

// timed runs call, and fails the test if it has not returned after many
// storage timeouts while the root is frozen (thawing it first, so that the
// test ends).
func (e *hungRootEnv) timed(what string, call func() error) (time.Duration, error) {
	e.t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(20 * storageTimeout):
		e.fs.Thaw()
		<-done
		e.t.Fatalf("%s: no answer while the root was frozen (%v): a hung root hangs the caller", what, 20*storageTimeout)
		return 0, nil
	}
}

// requireTimedOut: the call failed with the stall error, unavailable
// (containerd retries), naming the root and the deadline, within the
// bound: after waiting its deadline, or at once once the root is known
// not to answer (its probe, docs/design.md §8.19).
func (e *hungRootEnv) requireTimedOut(what string, call func() error) {
	e.t.Helper()
	took, err := e.timed(what, call)
	e.t.Logf("%s: failed after %v (deadline %v): %v", what, took.Round(time.Millisecond), storageTimeout, err)
	require.ErrorIs(e.t, err, contentv2.ErrRootStalled, what)
	require.True(e.t, errdefs.IsUnavailable(err), "%s: %v", what, err)
	require.Contains(e.t, err.Error(), e.fs.Dir, what)
	require.Contains(e.t, err.Error(), "not answering within "+storageTimeout.String(), what)
	// The bound is timed's watchdog (the old code hung until it); no
	// tighter wall-clock one, which a loaded machine breaks.
	require.Positive(e.t, e.fs.Blocked(), "%s answered while the root was still frozen", what)
}

func (e *hungRootEnv) gauge(name string) float64 {
	mfs, err := e.reg1.Gather()
	require.NoError(e.t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
			return sum
		}
	}
	e.t.Fatalf("%s not registered", name)
	return 0
}

func (e *hungRootEnv) refs(d digest.Digest) []string {
	r, err := e.coord.Core().Refs(e.ctx, d.String())
	require.NoError(e.t, err)
	return r.Nodes
}

// readBack reads every blob in descs through cs and checks its digest.
func (e *hungRootEnv) readBack(cs content.Store, descs ...ocispec.Descriptor) {
	e.t.Helper()
	for _, d := range descs {
		require.NoError(e.t, e.healthy(func() error { _, err := cs.Info(e.ctx, d.Digest); return err }), "info %s", d.Digest)
		var b []byte
		require.NoError(e.t, e.healthy(func() (err error) { b, err = content.ReadBlob(e.ctx, cs, d); return err }), "read %s", d.Digest)
		require.Equal(e.t, d.Digest, digest.FromBytes(b))
	}
}

// TestHungRootFailsCallsWithinTheDeadline: while node-1's view of the
// shared root is frozen (every syscall on it blocks), each of node-1's
// calls that touches it fails within its deadline with ErrRootStalled
// (unavailable, naming the root), the store reports itself stalled, and
// it decides nothing: a delete caught in its rename is undone, a later
// delete (which drops only the node's own reference) and a reaper pass
// are refused at once. node-2, on the same
// storage, is not affected. Once thawed, node-1 resumes by itself, and
// every blob either node uses reads back.
func TestHungRootFailsCallsWithinTheDeadline(t *testing.T) {
	e := newHungRootEnv(t)
	shared := e.write(e.n1, "shared ")
	_, err := e.n2.Info(e.ctx, shared.Digest)
	require.NoError(t, err)
	own := e.write(e.n1, "node-1 only ")
	own2 := e.write(e.n1, "node-1 only, too ")
	var ra content.ReaderAt
	require.NoError(t, e.healthy(func() (err error) { ra, err = e.n1.ReaderAt(e.ctx, shared); return err }))
	defer ra.Close()
	data, pending := blob("written across the freeze ")
	var w content.Writer
	require.NoError(t, e.healthy(func() (err error) {
		w, err = content.OpenWriter(e.ctx, e.n1, content.WithRef("pending"), content.WithDescriptor(pending))
		return err
	}))
	require.Zero(t, e.gauge("sharedcontent_root_stalled"))
	require.NoError(t, e.n1.(contentv2.StallReporter).RootStalled())

	e.fs.Freeze()
	// A delete the root does not answer: the probe of the root before it
	// (docs/design.md §8.19), bounded by the storage deadline, refuses it
	// as unavailable (or, should the probe answer, its rename hangs and
	// the delete keeps the blob); either way within the bound.
	took, err := e.timed("delete", func() error { return e.n1.Delete(e.ctx, own.Digest) })
	require.True(t, err == nil || errdefs.IsUnavailable(err), "a delete the root does not answer keeps the blob: %v", err)
	t.Logf("delete (root hung): returned after %v (deadline %v): %v", took.Round(time.Millisecond), storageTimeout, err)
	require.Positive(t, e.fs.Blocked(), "the delete answered while the root was still frozen")

	e.requireTimedOut("info", func() error { _, err := e.n1.Info(e.ctx, shared.Digest); return err })
	e.requireTimedOut("reader", func() error { _, err := e.n1.ReaderAt(e.ctx, shared); return err })
	e.requireTimedOut("read", func() error { _, err := ra.ReadAt(make([]byte, 10), 0); return err })
	e.requireTimedOut("write", func() error { _, err := w.Write(data); return err })
	_, fresh := blob("a fresh pull ")
	e.requireTimedOut("writer", func() error {
		_, err := e.n1.Writer(e.ctx, content.WithRef("fresh"), content.WithDescriptor(fresh))
		return err
	})
	require.GreaterOrEqual(t, e.gauge("sharedcontent_root_timeouts_total"), 1.0)
	require.Equal(t, 1.0, e.gauge("sharedcontent_root_stalled"))
	stalled := e.n1.(contentv2.StallReporter).RootStalled()
	require.ErrorIs(t, stalled, contentv2.ErrRootStalled)
	require.Contains(t, stalled.Error(), e.fs.Dir)

	// Nothing is decided from a stalled view, and at once: without a call
	// on the root (which would wait in the freeze, one more blocked
	// operation there, until its deadline). No wall-clock bound, which a
	// loaded machine breaks: the freeze counts what touched the root.
	blocked := e.fs.Blocked()
	took, err = e.timed("delete while stalled", func() error { return e.n1.Delete(e.ctx, own2.Digest) })
	require.NoError(t, err)
	require.Equal(t, blocked, e.fs.Blocked(), "a delete while stalled is refused without touching the root")
	t.Logf("delete while stalled: refused after %v", took)
	// containerd asks only for a blob it no longer uses, and retries a
	// failed delete only at a later collection: node-1's own reference
	// goes, the file stays (docs/design.md §8.19).
	require.Empty(t, e.refs(own2.Digest), "a delete refused while stalled drops node-1's own reference")
	require.FileExists(t, blobFile(e.fs.Backing, own2.Digest), "and keeps the file")
	took, err = e.timed("reaper", func() error { _, err := e.n1.Reap(e.ctx); return err })
	require.ErrorIs(t, err, contentv2.ErrRootStalled, "a reaper pass while stalled is refused")
	require.Equal(t, blocked, e.fs.Blocked(), "a reaper pass while stalled is refused without touching the root")
	t.Logf("reaper pass while stalled: refused after %v", took)

	// node-2 sees the storage directly: unaffected.
	e.readBack(e.n2, shared)
	other := e.write(e.n2, "node-2 during the freeze ")
	require.Positive(t, e.fs.Blocked(), "all of this ran while node-1's root was frozen")

	e.fs.Thaw()
	thawed := time.Now()
	require.Eventually(t, func() bool { return e.n1.Ready() == nil },
		20*storageTimeout, storageTimeout/10, "node-1 resumes by itself once its stuck calls return")
	require.NoError(t, e.n1.(contentv2.StallReporter).RootStalled())
	t.Logf("resumed %v after the thaw", time.Since(thawed).Round(time.Millisecond))
	require.Zero(t, e.gauge("sharedcontent_root_stalled"))
	require.NoError(t, w.Close())

	// The rename that landed after its deadline was put back.
	require.FileExists(t, blobFile(e.fs.Backing, own.Digest))
	e.readBack(e.n1, shared, own, own2)
	e.readBack(e.n2, shared, other)
	// And node-1 works again: the ingest the stuck write held, a delete,
	// a reaper pass.
	require.NoError(t, e.healthy(func() error { return content.WriteBlob(e.ctx, e.n1, "pending", bytes.NewReader(data), pending) }))
	e.readBack(e.n1, pending)
	require.NoError(t, e.healthy(func() error { return e.n1.Delete(e.ctx, own2.Digest) }))
	require.NoFileExists(t, blobFile(e.fs.Backing, own2.Digest))
	var rep contentv2.ReapReport
	require.NoError(t, e.healthy(func() (err error) { rep, err = e.n1.Reap(e.ctx); return err }))
	require.True(t, rep.Ran)
	e.readBack(e.n1, shared, own, pending)
	e.readBack(e.n2, shared, other)
}

// TestHungRootWalk: a walk of a frozen root fails within the deadline; a
// walk whose callback takes longer than the deadline does not.
func TestHungRootWalk(t *testing.T) {
	e := newHungRootEnv(t)
	e.write(e.n1, "a ")
	e.write(e.n1, "b ")
	n := 0
	require.NoError(t, e.healthy(func() error {
		n = 0
		return e.n1.Walk(e.ctx, func(content.Info) error {
			n++
			time.Sleep(storageTimeout + storageTimeout/2) // the caller's own time is not the root's
			return nil
		})
	}))
	require.Equal(t, 2, n)
	e.fs.Freeze()
	e.requireTimedOut("walk", func() error { return e.n1.Walk(e.ctx, func(content.Info) error { return nil }) })
	e.fs.Thaw()
	require.Eventually(t, func() bool { return e.n1.(contentv2.StallReporter).RootStalled() == nil },
		20*storageTimeout, storageTimeout/10)
	require.NoError(t, e.healthy(func() error {
		n = 0
		return e.n1.Walk(e.ctx, func(content.Info) error { n++; return nil })
	}))
	require.Equal(t, 2, n)
}
