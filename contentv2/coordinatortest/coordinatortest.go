package coordinatortest

import (
	"context"
	"fmt"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Cluster is one coordinator under test, fresh for each behaviour.
type Cluster interface {
	// Node returns the coordinator as node id reaches it.
	Node(t *testing.T, id string) contentv2.Coordinator
	// Queued returns how many requests of op wait in resource's queue.
	Queued(t *testing.T, op api.OperationType, resource string) int
}

// Run runs every behaviour of the contract as a subtest, each against a
// new cluster from newCluster. The cluster's session TTL must be long
// enough that no call of a test is late on a loaded machine (minutes).
func Run(t *testing.T, newCluster func(t *testing.T) Cluster) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, c Cluster)
	}{
		{"SessionOpen", testSessionOpen},
		{"SessionRefusals", testSessionRefusals},
		{"SyncReplaces", testSyncReplaces},
		{"SyncWithoutEcho", testSyncWithoutEcho},
		{"Restart", testRestart},
		{"AddRefWithoutSession", testAddRefWithoutSession},
		{"AddRefWhileDeleting", testAddRefWhileDeleting},
		{"RefsInOrder", testRefsInOrder},
		{"LockHeld", testLockHeld},
		{"PullSkip", testPullSkip},
		{"QueueHandOver", testQueueHandOver},
		{"QueueAcrossTypes", testQueueAcrossTypes},
		{"WaitCancelled", testWaitCancelled},
		{"Compatibility", testCompatibility},
		{"DeleteInUse", testDeleteInUse},
		{"DeleteUnsynced", testDeleteUnsynced},
		{"DeleteCompletion", testDeleteCompletion},
		{"ReapDelete", testReapDelete},
		{"ReapAfterDelete", testReapAfterDelete},
		{"Members", testMembers},
		{"ExpireMember", testExpireMember},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newCluster(t)) })
	}
}

// blob is the i-th test blob's digest.
func blob(i int) digest.Digest { return digest.FromString(fmt.Sprintf("contract blob %d", i)) }

// open opens a session of instance and returns its answer.
func open(t *testing.T, c contentv2.Coordinator, instance string) contentv2.SessionInfo {
	t.Helper()
	info, err := c.Session(t.Context(), contentv2.SessionRequest{InstanceID: instance})
	require.NoError(t, err)
	return info
}

// sync sends refs as the journal of generation gen, echoing info.
func sync(ctx context.Context, c contentv2.Coordinator, info contentv2.SessionInfo, gen string, refs ...digest.Digest) error {
	return c.SyncRefs(ctx, contentv2.SyncRequest{Generation: gen,
		Snapshot: func() ([]digest.Digest, error) { return refs, nil },
		Echo:     func() *contentv2.Echo { return &contentv2.Echo{Epoch: info.Epoch, Stamp: info.Stamp} }})
}

// join opens a session of instance and syncs refs in it: the node is then
// a synced member.
func join(t *testing.T, c contentv2.Coordinator, instance string, refs ...digest.Digest) contentv2.SessionInfo {
	t.Helper()
	info := open(t, c, instance)
	require.NoError(t, sync(t.Context(), c, info, "gen-"+instance, refs...))
	return info
}

// members returns n nodes, node-1 to node-n, each a synced member with no
// reference.
func members(t *testing.T, c Cluster, n int) []contentv2.Coordinator {
	t.Helper()
	nodes := make([]contentv2.Coordinator, n)
	for i := range nodes {
		nodes[i] = c.Node(t, fmt.Sprintf("node-%d", i+1))
		join(t, nodes[i], fmt.Sprintf("i%d", i+1))
	}
	return nodes
}

// renew renews the session info answered, and returns the new answer.
func renew(t *testing.T, c contentv2.Coordinator, instance string, info contentv2.SessionInfo) contentv2.SessionInfo {
	t.Helper()
	next, err := c.Session(t.Context(), contentv2.SessionRequest{InstanceID: instance,
		Echo: &contentv2.Echo{Epoch: info.Epoch, Stamp: info.Stamp}})
	require.NoError(t, err)
	return next
}

// refs returns every reference set the coordinator holds, by resource.
func refs(t *testing.T, c contentv2.Coordinator) map[string][]string {
	t.Helper()
	all := map[string][]string{}
	require.NoError(t, c.Refs(t.Context(), func(resource string, nodes []string) error {
		all[resource] = nodes
		return nil
	}))
	return all
}

// lock takes req and requires the grant.
func lock(t *testing.T, c contentv2.Coordinator, req api.LockRequest) contentv2.Lock {
	t.Helper()
	l, err := c.Lock(t.Context(), req)
	require.NoError(t, err, "%s:%s", req.Type, req.ResourceID)
	return l
}

func pull(d digest.Digest) api.LockRequest {
	return api.LockRequest{Type: api.OperationPull, ResourceID: d.String(), Wait: new(false)}
}

func del(d digest.Digest) api.LockRequest {
	return api.LockRequest{Type: api.OperationDelete, ResourceID: d.String(), Wait: new(false)}
}

func reapLock() api.LockRequest {
	return api.LockRequest{Type: api.OperationUpdate, ResourceID: api.ReapLockResource, Wait: new(false)}
}
