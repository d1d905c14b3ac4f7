package httpserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/members"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// The attacks that node identities stop (docs/design.md §9), each played by a peer on the network ("mallory",
// authenticated as herself) against nodes a and c. Each test fails on the
// coordinator before node identities.

// peers is a coordinator with per-node tokens and an admin token.
type peers struct {
	*testServer
	tokens map[string]string // node → token
}

func startPeers(t *testing.T, mutate ...func(*Config)) *peers {
	t.Helper()
	dir := t.TempDir()
	tokens := map[string]string{"node-a": "tok-a", "node-c": "tok-c", "mallory": "tok-m"}
	var lines []string
	for node, tok := range tokens {
		lines = append(lines, node+" "+tok)
	}
	nodesFile, adminFile := filepath.Join(dir, "nodes"), filepath.Join(dir, "admin")
	writeFile(t, nodesFile, "# node token\n"+strings.Join(lines, "\n")+"\n")
	writeFile(t, adminFile, "tok-admin\n")
	ts := startServer(t, filepath.Join(dir, "data"), append([]func(*Config){func(c *Config) {
		c.NodeTokensFile, c.AdminTokenFile = nodesFile, adminFile
	}}, mutate...)...)
	tokens["admin"] = "tok-admin"
	return &peers{testServer: ts, tokens: tokens}
}

// call sends a request as who ("" sends no credentials).
func (p *peers) call(t *testing.T, who, method, path string, q url.Values, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(t, err)
		r = bytes.NewReader(j)
	}
	target := p.url + path
	if q != nil {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequest(method, target, r)
	require.NoError(t, err)
	if who != "" {
		req.Header.Set("Authorization", "Bearer "+p.tokens[who])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

func (p *peers) lock(t *testing.T, who, node string) api.LockResponse {
	t.Helper()
	code, body := p.call(t, who, http.MethodPost, "/lock", nil, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: node})
	require.Equal(t, http.StatusOK, code, string(body))
	return decodeAs[api.LockResponse](t, body)
}

func (p *peers) status(t *testing.T, who string, q url.Values) (int, api.StatusResponse, []byte) {
	t.Helper()
	q.Set("type", "pull")
	q.Set("resource_id", blob)
	code, body := p.call(t, who, http.MethodGet, "/lock/status", q, nil)
	var st api.StatusResponse
	if code == http.StatusOK {
		st = decodeAs[api.StatusResponse](t, body)
	}
	return code, st, body
}

func requireCode(t *testing.T, wantStatus int, wantCode string, status int, body []byte) {
	t.Helper()
	require.Equal(t, wantStatus, status, string(body))
	require.Equal(t, wantCode, decodeAs[api.ErrorResponse](t, body).Code, string(body))
}

// TestAttackStatusLeaksNoRequestIDs: /lock/status published every holder's
// and waiter's request_id, the handle for everything else below.
func TestAttackStatusLeaksNoRequestIDs(t *testing.T) {
	p := startPeers(t)
	a := p.lock(t, "node-a", "node-a")
	c := p.lock(t, "node-c", "node-c")
	require.True(t, c.Queued)

	code, st, body := p.status(t, "mallory", url.Values{})
	require.Equal(t, http.StatusOK, code, string(body))
	require.NotContains(t, string(body), a.RequestID)
	require.NotContains(t, string(body), c.RequestID)
	require.Equal(t, "node-a", st.Holder.NodeID, "who holds it is no secret")
	require.Equal(t, 1, st.QueueLength)

	// Its own node sees its own request.
	_, st, _ = p.status(t, "node-a", url.Values{})
	require.Equal(t, a.RequestID, st.Holder.RequestID)
}

// TestAttackLeaseTheftByStatus: /lock/status?request_id= returned that
// request's lease to anyone; mallory used node-a's lease.
func TestAttackLeaseTheftByStatus(t *testing.T) {
	p := startPeers(t)
	a := p.lock(t, "node-a", "node-a")

	// Knowing (somehow) node-a's request ID: asked as herself, nothing.
	code, st, body := p.status(t, "mallory", url.Values{"request_id": {a.RequestID}})
	require.Equal(t, http.StatusOK, code, string(body))
	require.NotContains(t, string(body), a.LeaseID)
	require.False(t, st.Request.Acquired)
	// Asked as node-a: refused.
	code, _, body = p.status(t, "mallory", url.Values{"node_id": {"node-a"}, "request_id": {a.RequestID}})
	requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)
	// The owner gets it.
	_, st, _ = p.status(t, "node-a", url.Values{"request_id": {a.RequestID}})
	require.Equal(t, a.LeaseID, st.Request.LeaseID)
}

// TestAttackReleaseOthersLease: mallory released node-a's pull as a
// success with its lease.
func TestAttackReleaseOthersLease(t *testing.T) {
	p := startPeers(t)
	members.Open(t, p.Coordinator, "node-a")
	a := p.lock(t, "node-a", "node-a")
	for _, req := range []api.UnlockRequest{
		{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID, Success: true},                    // node_id filled in: mallory
		{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID, Success: true, NodeID: "mallory"}, // not the holder
	} {
		code, body := p.call(t, "mallory", http.MethodPost, "/unlock", nil, req)
		requireCode(t, http.StatusForbidden, api.CodeNotHolder, code, body)
	}
	code, body := p.call(t, "mallory", http.MethodPost, "/unlock", nil,
		api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID, Success: true, NodeID: "node-a"})
	requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)
	code, body = p.call(t, "mallory", http.MethodPost, "/lock/keepalive", nil,
		api.KeepaliveRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID})
	requireCode(t, http.StatusForbidden, api.CodeNotHolder, code, body)

	_, st, _ := p.status(t, "node-a", url.Values{})
	require.NotNil(t, st.Holder, "node-a still holds its lock")
	require.Nil(t, st.Completed)
	code, body = p.call(t, "node-a", http.MethodPost, "/unlock", nil,
		api.UnlockRequest{Type: api.OperationPull, ResourceID: blob, LeaseID: a.LeaseID, Success: true})
	require.Equal(t, http.StatusOK, code, string(body))
}

// TestAttackCancelOthersRequest: /lock/cancel went by request_id alone;
// mallory cancelled node-c's grant.
func TestAttackCancelOthersRequest(t *testing.T) {
	p := startPeers(t)
	p.lock(t, "node-a", "node-a")
	c := p.lock(t, "node-c", "node-c")
	require.True(t, c.Queued)

	code, body := p.call(t, "mallory", http.MethodPost, "/lock/cancel", nil,
		api.CancelRequest{Type: api.OperationPull, ResourceID: blob, RequestID: c.RequestID})
	require.Equal(t, http.StatusOK, code, "cancelling a request one does not have is not an error: %s", body)
	code, body = p.call(t, "mallory", http.MethodPost, "/lock/cancel", nil,
		api.CancelRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "node-c", RequestID: c.RequestID})
	requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)

	_, st, _ := p.status(t, "node-c", url.Values{"request_id": {c.RequestID}})
	require.True(t, st.Request.Queued, "node-c is still queued")
}

// TestAttackActAsAnotherNode: any client could send a delete with
// node_id=X and strip X's references, or sync X's references away.
func TestAttackActAsAnotherNode(t *testing.T) {
	p := startPeers(t)
	members.Open(t, p.Coordinator, "node-a")
	code, body := p.call(t, "node-a", http.MethodPost, "/refs/add", nil, api.RefsAddRequest{ResourceID: blob, NodeID: "node-a"})
	require.Equal(t, http.StatusOK, code, string(body))

	for _, tc := range []struct {
		name, method, path string
		body               any
	}{
		{"delete as node-a", http.MethodPost, "/lock", api.LockRequest{Type: api.OperationDelete, ResourceID: blob, NodeID: "node-a"}},
		{"reference as node-a", http.MethodPost, "/refs/add", api.RefsAddRequest{ResourceID: "sha256:other", NodeID: "node-a"}},
		{"session as node-a", http.MethodPost, "/nodes/session", api.SessionRequest{NodeID: "node-a"}},
		{"end node-a's session", http.MethodPost, "/nodes/session/end", api.EndSessionRequest{NodeID: "node-a", InstanceID: "i"}},
		{"sync node-a", http.MethodPut, "/nodes/node-a/refs", api.SyncRequest{Done: true}},
		{"forget node-a", http.MethodDelete, "/nodes/node-a", nil},
		{"adopt", http.MethodPost, "/cluster/adopt", api.AdoptRequest{ClusterID: "mine"}},
	} {
		code, body := p.call(t, "mallory", tc.method, tc.path, nil, tc.body)
		requireCode(t, http.StatusForbidden, api.CodeForbidden, code, body)
	}
	code, body = p.call(t, "", http.MethodPost, "/refs/add", nil, api.RefsAddRequest{ResourceID: blob, NodeID: "node-a"})
	requireCode(t, http.StatusUnauthorized, api.CodeUnauthorized, code, body)

	refs, err := p.Coordinator.Refs(t.Context(), blob)
	require.NoError(t, err)
	require.Equal(t, []string{"node-a"}, refs.Nodes, "node-a's reference is intact")
	// The admin may forget a node (gone never joined: not found, past the
	// identity check).
	code, body = p.call(t, "admin", http.MethodDelete, "/nodes/gone", nil, nil)
	requireCode(t, http.StatusNotFound, api.CodeNotFound, code, body)
}

// TestAttackUnknownMemberRefused: a client written from the seeds'
// protocol sends node_id with /unlock, and the coordinator refused the
// whole request ("unknown object member name"). Unknown members are
// ignored now; duplicates and wrong types are still refused.
func TestAttackUnknownMemberRefused(t *testing.T) {
	p := startPeers(t)
	members.Open(t, p.Coordinator, "node-a")
	a := p.lock(t, "node-a", "node-a")
	body := `{"type":"pull","resource_id":"` + blob + `","lease_id":"` + a.LeaseID + `","node_id":"node-a","success":true,"added_in_v9":{"x":[1]}}`
	code, out := p.call(t, "node-a", http.MethodPost, "/unlock", nil, body)
	require.Equal(t, http.StatusOK, code, string(out))

	code, out = p.call(t, "node-a", http.MethodPost, "/lock", nil, `{"type":"pull","resource_id":"x","node_id":"node-a","node_id":"node-c"}`)
	requireCode(t, http.StatusBadRequest, api.CodeInvalidArgument, code, out)
	code, out = p.call(t, "node-a", http.MethodPost, "/lock", nil, `{"type":"pull","resource_id":"x","node_id":"node-a","wait":"yes"}`)
	requireCode(t, http.StatusBadRequest, api.CodeInvalidArgument, code, out)
}

// TestAttackProtocolVersion: a client and a coordinator that disagree on
// the protocol get a clear error instead of a misread answer.
func TestAttackProtocolVersion(t *testing.T) {
	p := startPeers(t)
	req, err := http.NewRequest(http.MethodGet, p.url+"/nodes", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer tok-a")
	req.Header.Set(api.ProtocolHeader, "2")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	requireCode(t, http.StatusBadRequest, api.CodeUnsupportedProtocol, resp.StatusCode, body)
	require.Contains(t, decodeAs[api.ErrorResponse](t, body).Error, `protocol "2"`)
	require.Equal(t, api.ProtocolVersion, resp.Header.Get(api.ProtocolHeader))
}

// TestAttackQueueFlood: one node could queue without bound. Past
// MaxWaitersPerNode it gets 429, others are still served, and it is
// served again once below the bound.
func TestAttackQueueFlood(t *testing.T) {
	p := startPeers(t, func(c *Config) { c.MaxWaitersPerNode = 3 })
	p.lock(t, "node-a", "node-a")
	var queued []api.LockResponse
	for range 3 {
		queued = append(queued, p.lock(t, "mallory", "mallory"))
	}
	code, body := p.call(t, "mallory", http.MethodPost, "/lock", nil, api.LockRequest{Type: api.OperationPull, ResourceID: blob, NodeID: "mallory"})
	requireCode(t, http.StatusTooManyRequests, api.CodeTooManyRequests, code, body)
	require.True(t, p.lock(t, "node-c", "node-c").Queued, "another node still queues")

	code, body = p.call(t, "mallory", http.MethodPost, "/lock/cancel", nil,
		api.CancelRequest{Type: api.OperationPull, ResourceID: blob, RequestID: queued[0].RequestID})
	require.Equal(t, http.StatusOK, code, string(body))
	require.True(t, p.lock(t, "mallory", "mallory").Queued, "served again below the bound")
}
