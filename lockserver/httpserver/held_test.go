package httpserver

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestHeldLocks: GET /locks/held lists the pull locks held now (the
// in-flight downloads), oldest first, each with its holder and its
// waiters in queue order; an update lock is not a download. Only the admin
// identity may ask, and a bad type is refused naming it.
func TestHeldLocks(t *testing.T) {
	tokens := t.TempDir()
	writeFile(t, tokens+"/admin", "admin-secret\n")
	ts := startServer(t, t.TempDir(), func(c *Config) { c.AdminTokenFile = tokens + "/admin" })
	ctx := context.Background()
	lock := func(typ api.OperationType, res, node string) api.LockResponse {
		t.Helper()
		resp, err := ts.Coordinator.Lock(ctx, api.LockRequest{Type: typ, ResourceID: res, NodeID: node, Wait: new(true)})
		require.NoError(t, err)
		return resp
	}
	require.True(t, lock(api.OperationPull, "sha256:first", "a").Acquired)
	require.True(t, lock(api.OperationPull, "sha256:first", "b").Queued)
	require.True(t, lock(api.OperationPull, "sha256:first", "c").Queued)
	second := lock(api.OperationPull, "sha256:second", "b")
	require.True(t, second.Acquired)
	require.True(t, lock(api.OperationUpdate, "sha256:labels", "c").Acquired)

	status, body := get(t, ts.url, "/locks/held", nil)
	require.Equal(t, http.StatusUnauthorized, status, string(body))

	c, err := lockclient.New(ts.url, lockclient.WithBearerToken("admin-secret"), lockclient.WithNodeID("sharedcontentctl"))
	require.NoError(t, err)
	defer c.Close()
	held, err := c.Downloads(ctx)
	require.NoError(t, err)
	require.Equal(t, api.OperationPull, held.Type)
	require.Equal(t, 2, held.Total)
	require.Len(t, held.Locks, 2)
	first, next := held.Locks[0], held.Locks[1]
	require.Equal(t, "sha256:first", first.ResourceID, "the oldest grant first")
	require.Equal(t, "a", first.Holder.NodeID)
	require.NotEmpty(t, first.Holder.AcquiredAt)
	require.Equal(t, 2, first.QueueLength)
	require.Equal(t, []string{"b", "c"}, []string{first.Queue[0].NodeID, first.Queue[1].NodeID}, "the waiters in queue order")
	require.Empty(t, first.Queue[0].RequestID, "request IDs are not shown to others")
	require.Equal(t, "sha256:second", next.ResourceID)
	require.Equal(t, "b", next.Holder.NodeID)
	require.Zero(t, next.QueueLength)

	req, err := http.NewRequest(http.MethodGet, ts.url+"/locks/held?"+url.Values{"type": {"update"}}.Encode(), nil)
	require.NoError(t, err)
	status, body, _ = send(t, req, "Authorization", "Bearer admin-secret")
	require.Equal(t, http.StatusOK, status, string(body))
	updates := decodeAs[api.HeldLocksResponse](t, body)
	require.Len(t, updates.Locks, 1)
	require.Equal(t, "sha256:labels", updates.Locks[0].ResourceID)

	req, err = http.NewRequest(http.MethodGet, ts.url+"/locks/held?type=bogus", nil)
	require.NoError(t, err)
	status, body, _ = send(t, req, "Authorization", "Bearer admin-secret")
	require.Equal(t, http.StatusBadRequest, status, string(body))
	require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, `type "bogus"`)

	// The holder gives up: the download ends and is no longer listed.
	_, err = ts.Coordinator.Unlock(ctx, api.UnlockRequest{Type: api.OperationPull, ResourceID: "sha256:second",
		LeaseID: second.LeaseID, NodeID: "b", Error: "gave up"})
	require.NoError(t, err)
	held, err = c.Downloads(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, held.Total)
	require.Equal(t, "sha256:first", held.Locks[0].ResourceID)
}
