package contentv2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/require"
)

// longTTL is the session TTL of tests that drive the session loop
// themselves (kick): its timer (TTL/3) never fires during a test, and no
// answer gets too old to echo.
const longTTL = time.Hour

// fakeStore is node's store on root, coordinated through c, counting
// with c's session TTL; opts come last (WithStateDir replaces the
// default temp dir).
func fakeStore(t *testing.T, c *fakeCluster, root, node string, opts ...Option) *store {
	t.Helper()
	cs, err := NewStore(root, node, c.node(node), append([]Option{WithStateDir(t.TempDir()), WithSessionTTL(c.ttl)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs.(*store)
}

func testBlob(s string) ([]byte, ocispec.Descriptor) {
	b := bytes.Repeat([]byte(s), 100)
	return b, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: digest.FromBytes(b), Size: int64(len(b))}
}

func writerOf(desc ocispec.Descriptor) []content.WriterOpt {
	return []content.WriterOpt{content.WithRef("layer-" + desc.Digest.String()), content.WithDescriptor(desc)}
}

// kick runs one session round now and waits until the coordinator has
// seen its session call; the round before it has ended by then.
func kick(t *testing.T, s *store, c *fakeCluster) fakeCall {
	t.Helper()
	before := len(calls(c.recorded(), "Session"))
	s.kick <- struct{}{}
	log := c.await(t, "a session call", func(log []fakeCall) bool { return len(calls(log, "Session")) > before })
	return calls(log, "Session")[before]
}

// awaitJoined runs session rounds until s is a member of its root's
// cluster (a sync of it completed once).
func awaitJoined(t *testing.T, s *store, c *fakeCluster) {
	t.Helper()
	for range 1000 {
		if s.joined() {
			return
		}
		kick(t, s, c)
	}
	t.Fatal("no sync of this node completed in 1000 session rounds")
}

// calls returns the calls of method in log.
func calls(log []fakeCall, method string) []fakeCall {
	var out []fakeCall
	for _, c := range log {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// TestRenewalsEchoTheLastAnswer: while the coordinator answers, each
// round renews the session (no new open, no new sync), echoing the epoch
// and stamp of the last answer and the time since it was received, which
// is no more than the coordinator measured between its answer and the
// renewal's arrival.
func TestRenewalsEchoTheLastAnswer(t *testing.T) {
	c := newFakeCluster(longTTL)
	s := fakeStore(t, c, t.TempDir(), "node-1")
	for range 3 {
		kick(t, s, c)
	}
	log := c.recorded()
	sessions := calls(log, "Session")
	require.Len(t, sessions, 5, "two opens at start (before and after the root records its cluster), three renewals")
	for i, call := range sessions[2:] {
		prev := sessions[i+1]
		require.NotNil(t, call.Session.Echo, "renewal %d", i)
		require.Equal(t, Echo{Epoch: prev.Answer.Epoch, Stamp: prev.Answer.Stamp, Elapsed: call.Session.Echo.Elapsed}, *call.Session.Echo)
		require.GreaterOrEqual(t, call.Session.Echo.Elapsed, time.Duration(0))
		require.LessOrEqual(t, call.Session.Echo.Elapsed, call.At.Sub(prev.AnsweredAt), "renewal %d: elapsed measured within the answer-to-renewal time", i)
		require.NoError(t, call.Err)
	}
	require.Len(t, calls(log, "SyncRefs"), 1, "synced once, at start")
	s.smu.Lock()
	sent := s.renewalSent
	s.smu.Unlock()
	require.False(t, sent.After(sessions[4].At), "the last renewal is recorded as sent when, or before, it arrived")
	require.True(t, sent.After(sessions[3].AnsweredAt), "and after the answer it echoes")
}

// TestLateRenewalOpensANewSession: a renewal refused as late is followed,
// in the same round, by an open, which starts unsynced: the journal is
// synced again.
func TestLateRenewalOpensANewSession(t *testing.T) {
	c := newFakeCluster(longTTL)
	s := fakeStore(t, c, t.TempDir(), "node-1")
	c.setRefuse(func(call fakeCall) error {
		if call.Method == "Session" && call.Session.Echo != nil {
			c.refuse = nil // once
			return fmt.Errorf("renewal: %w", api.ErrLate)
		}
		return nil
	})
	late := kick(t, s, c)
	require.ErrorIs(t, late.Err, api.ErrLate)
	log := c.await(t, "the sync after the late renewal", func(log []fakeCall) bool { return len(calls(log, "SyncRefs")) == 2 })
	i := len(log) - 1
	require.Equal(t, []string{"Session", "Session", "SyncRefs"}, []string{log[i-2].Method, log[i-1].Method, log[i].Method})
	require.Nil(t, log[i-1].Session.Echo, "an open")
	require.False(t, log[i-1].Answer.Synced)
	require.NoError(t, log[i].Err)
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.sessionRefusals.WithLabelValues("late")))
	next := kick(t, s, c)
	require.NotNil(t, next.Session.Echo, "renewing the new session")
	require.True(t, next.Answer.Synced)
}

// TestLateSyncReopensTheSession: a sync refused as late leaves no answer
// to echo: the next round opens a new session, and syncs in it.
func TestLateSyncReopensTheSession(t *testing.T) {
	c := newFakeCluster(longTTL)
	s := fakeStore(t, c, t.TempDir(), "node-1")
	c.unsync("node-1") // as after a coordinator restart
	c.setRefuse(func(call fakeCall) error {
		if call.Method == "SyncRefs" {
			c.refuse = nil // once
			return fmt.Errorf("sync: %w", api.ErrLate)
		}
		return nil
	})
	renewal := kick(t, s, c)
	require.False(t, renewal.Answer.Synced)
	c.await(t, "the late sync", func(log []fakeCall) bool {
		syncs := calls(log, "SyncRefs")
		return len(syncs) == 2 && errors.Is(syncs[1].Err, api.ErrLate)
	})
	open := kick(t, s, c)
	require.Nil(t, open.Session.Echo, "a new session, not a renewal of the late one")
	log := c.await(t, "the sync in the new session", func(log []fakeCall) bool { return len(calls(log, "SyncRefs")) == 3 })
	require.NoError(t, calls(log, "SyncRefs")[2].Err)
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.sessionRefusals.WithLabelValues("late")))
}

// backdate moves s's record of its last renewal d into the past, as if
// the time since had passed.
func backdate(s *store, d time.Duration) {
	s.smu.Lock()
	defer s.smu.Unlock()
	s.renewalSent = s.renewalSent.Add(-d)
}

// TestFailOpenRule: a member cut off from the coordinator uses a blob
// unreferenced only FailOpenDelay after its last renewal, counted with the
// larger of the configured TTL and the one the coordinator announced; a
// refused identity never does.
func TestFailOpenRule(t *testing.T) {
	c := newFakeCluster(longTTL)
	s := fakeStore(t, c, t.TempDir(), "node-1", WithSessionTTL(time.Minute))
	require.Equal(t, longTTL, s.failOpenTTL(), "the announced TTL is longer than the configured one")
	c.setDown(true)
	delay := FailOpenDelay(longTTL)

	backdate(s, FailOpenDelay(time.Minute)+time.Minute)
	err := s.failOpenRefused(errFakeDown)
	require.ErrorIs(t, err, errdefs.ErrUnavailable, "the configured TTL's delay is not enough")
	require.ErrorContains(t, err, "once this node's session has surely expired")

	require.ErrorContains(t, s.failOpenRefused(fmt.Errorf("token: %w", errdefs.ErrPermissionDenied)), "fix this node's credentials")

	s.smu.Lock()
	s.renewalSent = time.Now().Add(-delay)
	s.smu.Unlock()
	require.NoError(t, s.failOpenRefused(errFakeDown))
	require.ErrorContains(t, s.failOpenRefused(fmt.Errorf("token: %w", errdefs.ErrUnauthenticated)), "fix this node's credentials",
		"an identity refused is never an outage")
	s.smu.Lock()
	sent, opened := s.renewalSent, s.failedOpen
	s.smu.Unlock()
	require.GreaterOrEqual(t, opened.Sub(sent), delay, "failed open FailOpenDelay after the last renewal sent")
}

// TestFailOpenAfterDelay: with the coordinator down, a member's write
// waits, then goes ahead FailOpenDelay after the last renewal the store
// sent (by its own record), and is journaled; a delete removes nothing.
// Once the coordinator is back the journal reaches it.
func TestFailOpenAfterDelay(t *testing.T) {
	const ttl = 30 * time.Millisecond
	c := newFakeCluster(ttl)
	root := t.TempDir()
	s := fakeStore(t, c, root, "node-1", WithRefRetryInterval(10*time.Millisecond))
	ctx := context.Background()
	data, desc := testBlob("fail open ")
	// Only a member fails open, and at this TTL a loaded machine can make
	// the first sync's last chunk late (then it is not synced): wait for
	// a completed sync before the outage.
	awaitJoined(t, s, c)

	c.setDown(true)
	_, err := s.Writer(ctx, writerOf(desc)...)
	require.ErrorIs(t, err, errdefs.ErrUnavailable, "not before the session has surely expired")
	require.NoError(t, content.WriteBlob(ctx, s, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc))
	s.smu.Lock()
	sent, opened := s.renewalSent, s.failedOpen
	s.smu.Unlock()
	require.GreaterOrEqual(t, opened.Sub(sent), FailOpenDelay(ttl), "failed open FailOpenDelay after the last renewal sent")
	require.True(t, s.journal.has(desc.Digest))
	require.NoError(t, s.Delete(ctx, desc.Digest))
	require.FileExists(t, s.blobPath(desc.Digest), "no delete without the coordinator")

	c.setDown(false)
	c.await(t, "the journal synced", func([]fakeCall) bool { return len(c.nodesOf(desc.Digest.String())) == 1 })
	require.Equal(t, []string{"node-1"}, c.nodesOf(desc.Digest.String()))
}

// TestDuplicateNodeNeverFailsOpen: while the coordinator refuses this
// node's session because another live instance uses its node ID, the
// node uses no blob without it, however long since its last renewal.
func TestDuplicateNodeNeverFailsOpen(t *testing.T) {
	c := newFakeCluster(longTTL)
	root := t.TempDir()
	s := fakeStore(t, c, root, "node-1")
	c.setRefuse(func(call fakeCall) error {
		if call.Method == "Session" {
			return fmt.Errorf("node-1: %w", api.ErrDuplicateNode)
		}
		return errFakeDown
	})
	require.ErrorIs(t, kick(t, s, c).Err, api.ErrDuplicateNode)
	// kick returns once the coordinator has seen the call, before the
	// round has recorded its answer; the next round's call comes after.
	require.ErrorIs(t, kick(t, s, c).Err, api.ErrDuplicateNode)
	backdate(s, 2*FailOpenDelay(longTTL))
	_, desc := testBlob("duplicate ")
	_, err := s.Writer(context.Background(), writerOf(desc)...)
	require.ErrorIs(t, err, api.ErrDuplicateNode)
	require.ErrorContains(t, err, "--node-id")
	require.NoFileExists(t, s.blobPath(desc.Digest))
	require.Positive(t, testutil.ToFloat64(s.metrics.sessionRefusals.WithLabelValues("duplicate_node")),
		"counted (again at each round the failed write kicks)")
}

// TestWrongClusterAtStart: a root of another cluster than the
// coordinator's is refused at start, saying what to do.
func TestWrongClusterAtStart(t *testing.T) {
	c := newFakeCluster(longTTL)
	root := t.TempDir()
	_, _, err := claimRoot(root, "another-cluster", "node-0")
	require.NoError(t, err)
	_, err = NewStore(root, "node-1", c.node("node-1"), WithStateDir(t.TempDir()))
	var wrong *WrongClusterError
	require.ErrorAs(t, err, &wrong)
	require.ErrorIs(t, err, api.ErrWrongCluster)
	require.Equal(t, "another-cluster", wrong.RootCluster)
	_, err = os.Stat(nodesDir(root))
	require.ErrorIs(t, err, os.ErrNotExist, "a refused node leaves no marker")
}

// captureLogs records the log entries of node until the test ends.
func captureLogs(t *testing.T, node string) func() []logrus.Entry {
	hook := new(logtest.Hook)
	logger := log.L.Logger
	hooks := logrus.LevelHooks{}
	for lvl, hs := range logger.Hooks {
		hooks[lvl] = append(hooks[lvl], hs...)
	}
	hooks.Add(hook)
	old := logger.ReplaceHooks(hooks)
	t.Cleanup(func() { logger.ReplaceHooks(old) })
	return func() []logrus.Entry {
		var out []logrus.Entry
		for _, e := range hook.AllEntries() {
			if e.Data["node"] == node {
				out = append(out, *e)
			}
		}
		return out
	}
}

// startMessage is the entry of logs that says what a store without a
// session at start does.
func startMessage(t *testing.T, logs []logrus.Entry) logrus.Entry {
	t.Helper()
	for _, e := range logs {
		if bytes.Contains([]byte(e.Message), []byte("at start")) {
			return e
		}
	}
	t.Fatalf("no start message among %d entries", len(logs))
	return logrus.Entry{}
}

// TestNoSessionAtStartMessage: a store whose coordinator does not answer
// at start says what it does meanwhile, and it does so: a node that never
// joined its root's cluster has no session that could lapse, so it writes
// nothing without the coordinator, however long it waits; a member writes
// once its session has surely expired.
func TestNoSessionAtStartMessage(t *testing.T) {
	ctx := context.Background()
	data, desc := testBlob("start ")
	t.Run("never joined", func(t *testing.T) {
		c := newFakeCluster(longTTL)
		c.setDown(true)
		logs := captureLogs(t, "node-1")
		s := fakeStore(t, c, t.TempDir(), "node-1")
		msg := startMessage(t, logs())
		require.Contains(t, msg.Message, "never joined its root's cluster: writes and deletes wait until the coordinator answers")
		require.NotContains(t, msg.Message, "writes go on")

		backdate(s, 2*FailOpenDelay(longTTL))
		_, err := s.Writer(ctx, writerOf(desc)...)
		require.ErrorIs(t, err, errdefs.ErrUnavailable)
		require.ErrorContains(t, err, "never joined the cluster of its root")
	})
	// A coordinator that answered, refusing the round as late, was
	// reachable: the message says so, not that it was unreachable.
	t.Run("late", func(t *testing.T) {
		c := newFakeCluster(longTTL)
		c.setRefuse(func(call fakeCall) error {
			if call.Method == "Session" {
				return fmt.Errorf("node-1: %w", api.ErrLate)
			}
			return nil
		})
		logs := captureLogs(t, "node-1")
		fakeStore(t, c, t.TempDir(), "node-1")
		msg := startMessage(t, logs())
		require.Contains(t, msg.Message, "reached the coordinator too late")
		require.NotContains(t, msg.Message, "not reachable")
	})
	t.Run("member", func(t *testing.T) {
		c := newFakeCluster(longTTL)
		root, state := t.TempDir(), t.TempDir()
		require.NoError(t, fakeStore(t, c, root, "node-1", WithStateDir(state)).Close())
		c.setDown(true)
		logs := captureLogs(t, "node-1")
		s := fakeStore(t, c, root, "node-1", WithStateDir(state))
		msg := startMessage(t, logs())
		require.Contains(t, msg.Message, "deletes wait; writes go on uncoordinated once this node's session has surely expired")
		require.Equal(t, FailOpenDelay(longTTL), msg.Data["fail_open_in"])

		backdate(s, FailOpenDelay(longTTL))
		require.NoError(t, content.WriteBlob(ctx, s, "layer-"+desc.Digest.String(), bytes.NewReader(data), desc))
		require.True(t, s.journal.has(desc.Digest))
	})
}
