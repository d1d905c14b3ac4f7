package etcdstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// family gathers m and returns its one sample of name.
func family(t *testing.T, m *etcdstore.Metrics, name string) *dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1, name)
			return f.GetMetric()[0]
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

// TestBytesAndDBSize: a transaction's bytes count its keys, and the
// database size is etcd's own, read from every member.
func TestBytesAndDBSize(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	m := etcdstore.NewMetrics()
	s := newLeaders(cli).campaign(t, "/test/"+t.Name()+"/", etcdstore.Options{Metrics: m})

	res := "sha256:" + strings.Repeat("ab", 32)
	b := new(refcount.Batch)
	for i := range 50 {
		b.AddRef(res, fmt.Sprintf("node-%03d", i))
	}
	require.NoError(t, s.Commit(t.Context(), b))

	h := family(t, m, "sharedcontent_etcd_txn_bytes").GetHistogram()
	require.NotZero(t, h.GetSampleCount())
	// Each reference's keys name the blob and the node at least once.
	require.GreaterOrEqual(t, h.GetSampleSum(), float64(50*(len(res)+len("node-000"))))

	require.Zero(t, family(t, m, "sharedcontent_etcd_db_size_bytes").GetGauge().GetValue())
	m.PollDBSizeOnce(t.Context(), cli)
	size := family(t, m, "sharedcontent_etcd_db_size_bytes").GetGauge().GetValue()
	inUse := family(t, m, "sharedcontent_etcd_db_size_in_use_bytes").GetGauge().GetValue()
	require.Positive(t, inUse)
	require.GreaterOrEqual(t, size, inUse)
}
