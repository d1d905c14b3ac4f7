package hostinstall

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
)

// apiServer is an HTTPS server answering GET of one DaemonSet the way the
// API server does, with the answer the test sets; the pod's token and the
// server's CA are in files, as a service account mounts them.
type apiServer struct {
	status atomic.Int32
	body   atomic.Value // string
	ds     DaemonSet
}

func newAPIServer(t *testing.T) *apiServer {
	a := &apiServer{}
	a.status.Store(http.StatusOK)
	a.body.Store(`{"kind":"DaemonSet","metadata":{"name":"sc-node","namespace":"sc"}}`)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/apps/v1/namespaces/sc/daemonsets/sc-node" || r.Header.Get("Authorization") != "Bearer pod-token" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.WriteHeader(int(a.status.Load()))
		_, _ = w.Write([]byte(a.body.Load().(string)))
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	a.ds = DaemonSet{APIServer: srv.URL, Namespace: "sc", Name: "sc-node",
		TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.crt")}
	require.NoError(t, os.WriteFile(a.ds.TokenFile, []byte("pod-token\n"), 0o600))
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	require.NoError(t, os.WriteFile(a.ds.CAFile, ca, 0o644))
	return a
}

func TestDaemonSetLookup(t *testing.T) {
	a := newAPIServer(t)
	for name, tc := range map[string]struct {
		status int
		body   string
		want   DaemonSetState
	}{
		"present":   {200, `{"metadata":{"name":"sc-node"}}`, DaemonSetPresent},
		"deleting":  {200, `{"metadata":{"name":"sc-node","deletionTimestamp":"2026-12-01T21:00:00Z"}}`, DaemonSetGone},
		"gone":      {404, `{"kind":"Status","code":404}`, DaemonSetGone},
		"forbidden": {403, `{"kind":"Status","code":403}`, DaemonSetForbidden},
	} {
		t.Run(name, func(t *testing.T) {
			a.status.Store(int32(tc.status))
			a.body.Store(tc.body)
			st, err := a.ds.Lookup(context.Background())
			require.NoError(t, err)
			require.Equal(t, tc.want, st)
		})
	}
	a.status.Store(http.StatusInternalServerError)
	_, err := a.ds.Lookup(context.Background())
	require.ErrorIs(t, err, errdefs.ErrUnavailable)
	down := a.ds
	down.APIServer = "https://127.0.0.1:1"
	require.ErrorIs(t, CheckAccess(context.Background(), down), errdefs.ErrUnavailable, "out of reach: the installer goes on")

	wrong := a.ds
	wrong.Name = "other"
	a.status.Store(http.StatusOK)
	// The DaemonSet present again: the subtests above ran in map order,
	// so the last body set is any of theirs.
	a.body.Store(`{"metadata":{"name":"sc-node"}}`)
	require.ErrorIs(t, CheckAccess(context.Background(), wrong), errdefs.ErrPermissionDenied, "the Role grants one DaemonSet")
	require.NoError(t, CheckAccess(context.Background(), a.ds))
}

// TestKeep: stopped while its DaemonSet remains (an upgrade, a drain), the
// keeper leaves the host service alone; also when the API server cannot
// be asked, and when it refuses credentials never seen to work. Stopped
// once the DaemonSet is deleted (helm uninstall), or once its Role is gone
// with it, it uninstalls.
func TestKeep(t *testing.T) {
	for name, tc := range map[string]struct {
		status     int
		body       string
		unverified bool
		uninstall  bool
	}{
		"upgrade":                 {200, `{"metadata":{"name":"sc-node"}}`, false, false},
		"api down":                {503, `unavailable`, false, false},
		"uninstall":               {404, `{"kind":"Status","code":404}`, false, true},
		"deleting":                {200, `{"metadata":{"name":"sc-node","deletionTimestamp":"2026-12-01T21:00:00Z"}}`, false, true},
		"role is gone":            {403, `{"kind":"Status","code":403}`, false, true},
		"refused, never verified": {403, `{"kind":"Status","code":403}`, true, false},
		"gone, never verified":    {404, `{"kind":"Status","code":404}`, true, true},
	} {
		t.Run(name, func(t *testing.T) {
			a := newAPIServer(t)
			n := installedNode(t)
			a.status.Store(int32(tc.status))
			a.body.Store(tc.body)

			stopped, stop := context.WithCancel(context.Background())
			stop()
			uninstalled, err := Keep(stopped, n.cfg, a.ds, !tc.unverified, time.Minute)
			require.NoError(t, err)
			require.Equal(t, tc.uninstall, uninstalled)
			require.Equal(t, !tc.uninstall, n.exists(UnitPath))
			require.Equal(t, !tc.uninstall, n.exists(DropInPath))
			if tc.uninstall {
				require.Contains(t, n.takeCalls(t), "stop "+Unit)
			} else {
				require.Empty(t, n.takeCalls(t), "the host service keeps serving")
			}
		})
	}
}
