package election

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

// startReplica runs a replica in process on loopback; it stops when the
// test ends.
func startReplica(t *testing.T, cli *clientv3.Client, prefix string) (*Replica, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String()
	opts := DefaultOptions()
	opts.Endpoints, opts.Prefix, opts.AdvertiseURL, opts.SessionTTL = []string{"unused"}, prefix, url, 3*time.Second
	r, err := New(cli, opts, lockserver.DefaultConfig())
	require.NoError(t, err)
	srv, err := httpserver.NewStandby(httpserver.Config{Config: lockserver.DefaultConfig(), Leadership: r.Leadership()}, r.Gatherer())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); r.Run(ctx, srv.Handler()) }()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		cancel()
		<-ran
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
	})
	return r, url
}

// stepDowns returns the replica's step-downs for reason.
func stepDowns(t *testing.T, r *Replica, reason string) float64 {
	return metric(t, r, "sharedcontent_leader_stepdowns_total", "reason", reason)
}

// metric returns the counter name of the replica's metrics, of the series
// whose label has value (any series when label is ""), 0 when none.
func metric(t *testing.T, r *Replica, name, label, value string) float64 {
	t.Helper()
	mfs, err := r.Gatherer().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" {
				return m.GetCounter().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func leads(r *Replica) bool {
	l, _ := r.Leadership().Leader()
	return l
}

// TestFencedCommitStepsDown: the leader's election key is taken away
// behind its back (its session is alive: only the guard can tell); its
// next write fails the guard and is answered 503, nothing is written, and
// the replica steps down at once (reason fenced), then campaigns again
// with a new session and leads again.
func TestFencedCommitStepsDown(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	cli := etcd.Client(t)
	const prefix = "/fenced-test/"
	r, url := startReplica(t, cli, prefix)
	require.Eventually(t, func() bool { return leads(r) }, time.Minute, 10*time.Millisecond, "the only replica leads")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// node-a holds a session, so that its reference is a write (one
	// without is refused before it writes: docs/design.md §8.4).
	session, err := json.Marshal(api.SessionRequest{NodeID: "node-a"})
	require.NoError(t, err)
	resp, err := http.Post(url+"/nodes/session", "application/json", bytes.NewReader(session))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = cli.Delete(ctx, prefix+"leader/", clientv3.WithPrefix())
	require.NoError(t, err)

	body, err := json.Marshal(api.RefsAddRequest{ResourceID: "blob-fenced", NodeID: "node-a"})
	require.NoError(t, err)
	resp, err = http.Post(url+"/refs/add", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a fenced write is refused: %s", buf.String())

	require.Eventually(t, func() bool { return stepDowns(t, r, "fenced") == 1 }, time.Minute, 10*time.Millisecond,
		"the replica stepped down on the failed guard")
	got, err := cli.Get(ctx, prefix+"refs/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.Zero(t, got.Count, "the fenced write wrote nothing")
	require.Eventually(t, func() bool { return leads(r) }, time.Minute, 10*time.Millisecond, "it campaigns again and leads")
	require.Equal(t, float64(1), stepDowns(t, r, "fenced"))
	// The etcd store's metrics are the replica's, over its terms.
	require.Equal(t, float64(1), metric(t, r, "sharedcontent_etcd_txns_failed_total", "reason", "fenced"),
		"the failed guard is counted")
	require.Positive(t, metric(t, r, "sharedcontent_etcd_txns_total", "", ""), "each term's start wrote through the store")
}

func TestValidate(t *testing.T) {
	ok := DefaultOptions()
	require.NoError(t, ok.Validate(), "no endpoints: no replica")
	ok.Endpoints, ok.AdvertiseURL = []string{"http://127.0.0.1:2379"}, "http://c0:8642"
	require.NoError(t, ok.Validate())
	for name, o := range map[string]Options{
		"advertise without endpoints": {Prefix: DefaultPrefix, SessionTTL: DefaultSessionTTL, AdvertiseURL: "http://c0:8642"},
		"endpoints without advertise": {Prefix: DefaultPrefix, SessionTTL: DefaultSessionTTL, Endpoints: ok.Endpoints},
		"advertise not a URL":         {Prefix: DefaultPrefix, SessionTTL: DefaultSessionTTL, Endpoints: ok.Endpoints, AdvertiseURL: "c0:8642"},
		"advertise with a query":      {Prefix: DefaultPrefix, SessionTTL: DefaultSessionTTL, Endpoints: ok.Endpoints, AdvertiseURL: "http://c0:8642/?x=1"},
		"TTL too short":               {Prefix: DefaultPrefix, SessionTTL: time.Second, Endpoints: ok.Endpoints, AdvertiseURL: ok.AdvertiseURL},
		"TTL not whole seconds":       {Prefix: DefaultPrefix, SessionTTL: 2500 * time.Millisecond, Endpoints: ok.Endpoints, AdvertiseURL: ok.AdvertiseURL},
		"empty prefix":                {SessionTTL: DefaultSessionTTL, Endpoints: ok.Endpoints, AdvertiseURL: ok.AdvertiseURL},
		"TLS to an http endpoint":     {Prefix: DefaultPrefix, SessionTTL: DefaultSessionTTL, Endpoints: ok.Endpoints, AdvertiseURL: ok.AdvertiseURL, CACert: "ca.pem"},
		"certificate without key":     {Prefix: DefaultPrefix, SessionTTL: DefaultSessionTTL, Endpoints: []string{"https://e0:2379"}, AdvertiseURL: ok.AdvertiseURL, Cert: "c.pem"},
		"TLS without endpoints":       {Prefix: DefaultPrefix, SessionTTL: DefaultSessionTTL, CACert: "ca.pem"},
	} {
		require.Error(t, o.Validate(), name)
	}
}
