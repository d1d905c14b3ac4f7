package httpserver

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
)

// The Coordinator side of the HTTP tests: a Coordinator to serve, and the calls a
// test makes on it directly to set up or check what a request did.

const blob = "sha256:aaaa"

func newTestRefs() *refcount.Manager {
	return refcount.NewManager(refcount.NewMemoryStorage())
}

func newTestCoordinator(t testing.TB) *lockserver.Coordinator {
	t.Helper()
	l, err := lockserver.NewCoordinator(lockserver.DefaultConfig(), lockserver.Options{Refs: newTestRefs()})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

func lockReq(typ api.OperationType, node string) api.LockRequest {
	return api.LockRequest{Type: typ, ResourceID: blob, NodeID: node}
}

// locked is a Lock answer with the node that asked: a request is known by
// both.
type locked struct {
	api.LockResponse
	Node string
}

func mustLock(t *testing.T, l *lockserver.Coordinator, typ api.OperationType, node string) locked {
	t.Helper()
	resp, err := l.Lock(context.Background(), lockReq(typ, node))
	require.NoError(t, err)
	return locked{resp, node}
}

// answers holds the last session answer each test node received, by
// Coordinator and node ID: session and syncRefs echo it, as a node does.
var answers sync.Map // nodeKey → answer

type nodeKey struct {
	l    *lockserver.Coordinator
	node string
}

type answer struct {
	resp     api.SessionResponse
	received time.Time
}

// echoOf is node's echo of its last session answer, or nil before its
// first one. The tests here renew well within the session TTL.
func echoOf(l *lockserver.Coordinator, node string) *api.Echo {
	v, ok := answers.Load(nodeKey{l, node})
	if !ok {
		return nil
	}
	a := v.(answer)
	return &api.Echo{Epoch: a.resp.Epoch, StampMs: a.resp.StampMs, ElapsedMs: time.Since(a.received).Milliseconds()}
}

// session renews node's session (opens it the first time), as a node
// does.
func session(t *testing.T, l *lockserver.Coordinator, node string) api.SessionResponse {
	t.Helper()
	resp, err := l.Session(context.Background(), api.SessionRequest{NodeID: node, Echo: echoOf(l, node)})
	require.NoError(t, err)
	answers.Store(nodeKey{l, node}, answer{resp, time.Now()})
	return resp
}

func syncRefs(t *testing.T, l *lockserver.Coordinator, node, syncID string, done bool, ids ...string) {
	t.Helper()
	req := api.SyncRequest{SyncID: syncID, ResourceIDs: ids, Done: done}
	if done {
		req.Echo = echoOf(l, node)
	}
	_, err := l.SyncRefs(context.Background(), node, req)
	require.NoError(t, err)
}

func refsOf(t *testing.T, l *lockserver.Coordinator, id string) []string {
	t.Helper()
	rc, err := l.Refs(context.Background(), id)
	require.NoError(t, err)
	return rc.Nodes
}

// absentMs is the member's absence as GET /nodes reports it, or -1.
func absentMs(t *testing.T, l *lockserver.Coordinator, node string) int64 {
	t.Helper()
	nodes, err := l.Nodes(context.Background())
	require.NoError(t, err)
	for _, n := range nodes.Nodes {
		if n.NodeID == node {
			return n.AbsentMs
		}
	}
	return -1
}

// reapLease takes the reap lock for node and returns its lease ID.
func reapLease(t *testing.T, l *lockserver.Coordinator, node string) string {
	t.Helper()
	resp, err := l.Lock(context.Background(), api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, NodeID: node})
	require.NoError(t, err)
	require.True(t, resp.Acquired)
	return resp.LeaseID
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(s), 0o600))
}
