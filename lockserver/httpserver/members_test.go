package httpserver

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestWrongClusterChangesNothing: a request that names another cluster is
// refused before it acts, so a wiped coordinator approves no delete for
// nodes of the old one; every answer names the coordinator's cluster.
func TestWrongClusterChangesNothing(t *testing.T) {
	ts := startServer(t, t.TempDir())
	members.Open(t, ts.Coordinator, "n1")
	c := ts.Coordinator.Cluster()
	_, err := ts.Coordinator.AddRef(context.Background(), blob, "n1")
	require.NoError(t, err)
	status, body := post(t, ts.url, "/lock", api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "n1"},
		api.ClusterHeader, "some-other-cluster")
	require.Equal(t, http.StatusConflict, status, string(body))
	require.Equal(t, api.CodeWrongCluster, decodeAs[api.ErrorResponse](t, body).Code)
	require.Equal(t, []string{"n1"}, refsOf(t, ts.Coordinator, blob), "nothing changed")

	resp, err := http.Get(ts.url + "/cluster")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, c.ClusterID+"/1", resp.Header.Get(api.ClusterHeader))

	_, err = ts.Coordinator.Session(context.Background(), api.SessionRequest{NodeID: "n2", ClusterID: "other"})
	require.ErrorIs(t, err, api.ErrWrongCluster)
	nodes, err := ts.Coordinator.Nodes(context.Background())
	require.NoError(t, err)
	require.Len(t, nodes.Nodes, 1, "a refused session makes no member")
	require.Equal(t, "n1", nodes.Nodes[0].NodeID)
}

// TestAdoptAndForget: a coordinator that lost its database adopts the
// root's cluster and members, and grants no delete until they synced; an
// admin forgets a node gone for good, dropping its references, but not a
// live one. Admin calls need the admin token.
func TestAdoptAndForget(t *testing.T) {
	dir := t.TempDir()
	tokens := t.TempDir()
	writeFile(t, tokens+"/admin", "admin-secret\n")
	ts := startServer(t, dir, func(c *Config) { c.AdminTokenFile = tokens + "/admin"; c.SessionTTL = 5 * time.Second })
	adopt := api.AdoptRequest{ClusterID: "the-roots-cluster", Nodes: []string{"n1", "n2"}}
	status, _ := post(t, ts.url, "/cluster/adopt", adopt)
	require.Equal(t, http.StatusUnauthorized, status)
	status, body := post(t, ts.url, "/cluster/adopt", adopt, "Authorization", "Bearer admin-secret")
	require.Equal(t, http.StatusOK, status, string(body))
	require.Equal(t, "the-roots-cluster", ts.Coordinator.Cluster().ClusterID)

	// n2 came back once, referenced a blob, and left (its session
	// ended: a member, unsynced, with a reference).
	ctx := context.Background()
	_, err := ts.Coordinator.Session(ctx, api.SessionRequest{NodeID: "n2", InstanceID: "i2"})
	require.NoError(t, err)
	_, err = ts.Coordinator.AddRef(ctx, "sha256:n2s", "n2")
	require.NoError(t, err)
	end, err := ts.Coordinator.EndSession(ctx, api.EndSessionRequest{NodeID: "n2", InstanceID: "i2"})
	require.NoError(t, err)
	require.True(t, end.Ended)

	session(t, ts.Coordinator, "n1")
	syncRefs(t, ts.Coordinator, "n1", "s", true)
	_, err = ts.Coordinator.Lock(ctx, lockReq(api.OperationDelete, "n1"))
	var ue *api.UnsyncedError
	require.ErrorAs(t, err, &ue)
	require.Equal(t, []string{"n2"}, ue.Nodes, "the adopted member that is away")

	// n2 is gone for good: forget it.
	forget := func(node string) int {
		req, _ := http.NewRequest(http.MethodDelete, ts.url+"/nodes/"+url.PathEscape(node), nil)
		req.Header.Set("Authorization", "Bearer admin-secret")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusConflict, forget("n1"), "a live node is not forgotten")
	require.Equal(t, http.StatusOK, forget("n2"))
	require.Empty(t, refsOf(t, ts.Coordinator, "sha256:n2s"))
	require.Equal(t, http.StatusNotFound, forget("n2"), "forgotten already: nothing to forget")
	require.Equal(t, http.StatusNotFound, forget("never-joined"))
	session(t, ts.Coordinator, "n1")
	require.True(t, mustLock(t, ts.Coordinator, api.OperationDelete, "n1").Acquired)
}

// TestSessionKeepsInstance: with the shared token or no auth anyone may
// speak for a node ID, so once the ID has sent an instance ID and a
// journal generation, a session without them is 400 and clears nothing:
// the node is not locked out, and no other host gets in. Releasing the
// ID is an admin call.
//
// Before: POST /nodes/session {"node_id":"node-a"} cleared node-a's
// instance, and the next session of another instance took the ID.
func TestSessionKeepsInstance(t *testing.T) {
	tokens := t.TempDir()
	writeFile(t, tokens+"/shared", "shared-secret\n")
	writeFile(t, tokens+"/admin", "admin-secret\n")
	for name, tc := range map[string]struct {
		mutate      func(*Config)
		auth, admin []string
	}{
		"no auth": {mutate: func(*Config) {}},
		"shared token": {mutate: func(c *Config) { c.AuthTokenFile, c.AdminTokenFile = tokens+"/shared", tokens+"/admin" },
			auth: []string{"Authorization", "Bearer shared-secret"}, admin: []string{"Authorization", "Bearer admin-secret"}},
	} {
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, t.TempDir(), tc.mutate)
			open := func(body string) (int, []byte) { return post(t, ts.url, "/nodes/session", body, tc.auth...) }
			status, body := open(`{"node_id":"node-a","instance_id":"i1","generation":"g1"}`)
			require.Equal(t, http.StatusOK, status, string(body))
			status, body = open(`{"node_id":"node-a"}`)
			require.Equal(t, http.StatusBadRequest, status, string(body))
			require.Contains(t, string(body), "instance_id")
			status, body = open(`{"node_id":"node-a","instance_id":"i1","generation":"g1"}`)
			require.Equal(t, http.StatusOK, status, "node-a renews as before: %s", body)
			status, body = open(`{"node_id":"node-a","instance_id":"i2","generation":"g2"}`)
			require.Equal(t, http.StatusConflict, status, string(body))
			require.Equal(t, api.CodeDuplicateNode, decodeAs[api.ErrorResponse](t, body).Code)

			if tc.auth != nil {
				status, _ = post(t, ts.url, "/nodes/node-a/release", "{}", tc.auth...)
				require.Equal(t, http.StatusForbidden, status, "release is an admin call")
			}
			status, body = post(t, ts.url, "/nodes/node-a/release", "{}", tc.admin...)
			require.Equal(t, http.StatusConflict, status, "node-a is live: %s", body)
			require.Equal(t, api.CodeMemberLive, decodeAs[api.ErrorResponse](t, body).Code)
		})
	}
}
