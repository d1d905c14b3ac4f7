package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// replicaTTL is the replicas' --etcd-session-ttl in these tests.
const replicaTTL = 3 * time.Second

// TestReplicasFailOverOnKill: of three replicas exactly one is ready and
// the others answer not_leader naming it; kill -9 of the leader, and
// another takes over; a client given every URL goes on locking and
// keeping its session. Then SIGTERM of the new leader: it resigns, and
// the last replica takes over.
func TestReplicasFailOverOnKill(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	reps := startReplicas(t, 3, etcd.Endpoints(), replicaTTL)
	leader := waitLeader(t, reps)
	for _, r := range reps {
		if r != leader {
			waitHint(t, r, leader)
		}
	}

	client := replicaClient(t, "node-a", reps)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cycle := func(resource string) {
		t.Helper()
		lockCycle(ctx, t, client, resource)
	}
	cycle("blob-before")

	killed := time.Now()
	require.NoError(t, leader.cmd.Process.Signal(syscall.SIGKILL))
	next := waitLeader(t, reps, leader)
	failover := time.Since(killed)
	cycle("blob-after")
	t.Logf("failover at --etcd-session-ttl %v: kill -9 → first /readyz 200 of the new leader %v; → a client's lock cycle done %v",
		replicaTTL, failover.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	var third *replicaProc
	for _, r := range reps {
		if r != leader && r != next {
			third = r
			waitHint(t, r, next)
		}
	}

	// A graceful stop resigns: the last replica takes over without
	// waiting for the lease.
	stopped := time.Now()
	require.NoError(t, next.cmd.Process.Signal(syscall.SIGTERM))
	require.Same(t, third, waitLeader(t, reps, leader, next))
	graceful := time.Since(stopped)
	cycle("blob-graceful")
	t.Logf("graceful failover: SIGTERM → first /readyz 200 of the new leader %v; → a client's lock cycle done %v",
		graceful.Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
}

// TestStoppedLeaderGrantsNothing: the leader is stopped (SIGSTOP) longer
// than its session's TTL; another replica wins and grants a lock; the old
// leader, resumed, answers a request for the same lock (sent while it was
// stopped) not_leader, and has stepped down.
func TestStoppedLeaderGrantsNothing(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	reps := startReplicas(t, 2, etcd.Endpoints(), replicaTTL)
	old := waitLeader(t, reps)
	status, resp, _, _ := lockAt(t, old, "blob-warm", "node-a", 10*time.Second)
	require.Equal(t, http.StatusOK, status)
	require.True(t, resp.Acquired)

	require.NoError(t, old.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := true
	defer func() {
		if stopped {
			_ = old.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	next := waitLeader(t, reps, old)
	status, resp, _, _ = lockAt(t, next, "blob-x", "node-b", 10*time.Second)
	require.Equal(t, http.StatusOK, status)
	require.True(t, resp.Acquired, "the new leader grants blob-x to node-b")

	// The same lock asked of the old leader: the request is in its socket
	// before it runs again.
	conn, err := net.Dial("tcp", strings.TrimPrefix(old.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	wait := false
	body, err := json.Marshal(api.LockRequest{Type: api.OperationPull, ResourceID: "blob-x", NodeID: "node-c", Wait: &wait})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, old.url+"/lock", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	require.NoError(t, req.Write(conn))

	require.NoError(t, old.cmd.Process.Signal(syscall.SIGCONT))
	stopped = false
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	answer, err := http.ReadResponse(bufio.NewReader(conn), req)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(answer.Body)
	answer.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, answer.StatusCode, "the resumed old leader grants nothing: %s", buf.String())
	var e api.ErrorResponse
	require.NoError(t, json.Unmarshal(buf.Bytes(), &e), buf.String())
	require.Equal(t, api.CodeNotLeader, e.Code, buf.String())

	// It has stepped down (its watchdog, or its lost session), and leads
	// no more while the new leader holds.
	require.Eventually(t, func() bool {
		return old.metric(t, "sharedcontent_leader_stepdowns_total") >= 1 && old.metric(t, "sharedcontent_leader") == 0
	}, time.Minute, 20*time.Millisecond, "the old leader's step-down metrics")
	require.False(t, old.ready(), "the old leader is not ready")
	status, _, e, _ = lockAt(t, old, "blob-x", "node-c", 10*time.Second)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, api.CodeNotLeader, e.Code)
	// The new leader's grant stands.
	status, _, e, _ = lockAt(t, next, "blob-x", "node-d", 10*time.Second)
	require.Equal(t, http.StatusConflict, status, "blob-x is still held by node-b on the new leader: %+v", e)
	require.True(t, next.ready())
}

// waitHint polls the standby r until it answers not_leader naming leader.
func waitHint(t *testing.T, r, leader *replicaProc) {
	t.Helper()
	var last string
	require.Eventually(t, func() bool {
		status, _, e, h := lockAt(t, r, "blob-probe", "node-probe", 10*time.Second)
		last = e.Code + " " + e.Leader + " " + h.Get(api.LeaderHeader)
		return status == http.StatusServiceUnavailable && e.Code == api.CodeNotLeader &&
			e.Leader == leader.url && h.Get(api.LeaderHeader) == leader.url
	}, time.Minute, 20*time.Millisecond, "standby %s names the leader %s (last: %s)", r.url, leader.url, last)
}
