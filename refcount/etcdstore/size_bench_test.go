package etcdstore_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// Sizing of the etcd store (docs/operations.md, "etcd"): how many bytes
// of etcd's database one reference and one member take, once etcd has
// compacted its history and defragmented the file.
const (
	sizeBlobs   = 1000 // distinct resources
	sizeNodes   = 100  // nodes referencing each: sizeBlobs·sizeNodes references
	sizeMembers = 10000
)

// BenchmarkDbSize fills a real one-member etcd through the store with
// 100,000 references (1,000 sha256 digests × 100 nodes, written 64 to a
// Commit, as a sync's groups are), then with 10,000 member records, and
// reports etcd's database size after each step, compacted and
// defragmented: db-bytes/ref and db-bytes/member are the growth per
// record.
//
//	go test -run '^$' -bench BenchmarkDbSize -benchtime 1x ./refcount/etcdstore/
func BenchmarkDbSize(b *testing.B) {
	for b.Loop() {
		c := etcdtest.Start(b, etcdtest.Options{Members: 1})
		cli := c.Client(b)
		s := newLeaders(cli).campaign(b, "/size/", etcdstore.Options{})
		ctx := b.Context()
		empty := dbSize(b, cli, c.Endpoint(0))

		batch := new(refcount.Batch)
		flush := func() {
			if batch.Len() == 0 {
				return
			}
			if err := s.Commit(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = new(refcount.Batch)
		}
		for blob := range sizeBlobs {
			id := fmt.Sprintf("sha256:%x", sha256.Sum256(fmt.Appendf(nil, "blob-%d", blob)))
			for node := range sizeNodes {
				batch.AddRef(id, fmt.Sprintf("node-%04d.cluster.example", node))
				if batch.Len() == refcount.GroupRefs {
					flush()
				}
			}
		}
		flush()
		refs := dbSize(b, cli, c.Endpoint(0))

		now := time.Now().UTC()
		for m := range sizeMembers {
			batch.PutMember(refcount.Member{ID: fmt.Sprintf("node-%05d.cluster.example", m), FirstSeen: now, LastSeen: now,
				Generation: fmt.Sprintf("%x", sha256.Sum256(fmt.Appendf(nil, "gen-%d", m)))[:32]})
			if batch.Len() == refcount.MaxGroupWrites {
				flush()
			}
		}
		flush()
		members := dbSize(b, cli, c.Endpoint(0))

		b.ReportMetric(float64(empty.DbSize), "db-bytes-empty")
		b.ReportMetric(float64(refs.DbSize), "db-bytes-refs")
		b.ReportMetric(float64(refs.DbSizeInUse), "db-in-use-refs")
		b.ReportMetric(float64(members.DbSize), "db-bytes-members")
		b.ReportMetric(float64(refs.DbSize-empty.DbSize)/(sizeBlobs*sizeNodes), "db-bytes/ref")
		b.ReportMetric(float64(refs.DbSizeInUse-empty.DbSizeInUse)/(sizeBlobs*sizeNodes), "in-use-bytes/ref")
		b.ReportMetric(float64(members.DbSize-refs.DbSize)/sizeMembers, "db-bytes/member")
		b.ReportMetric(float64(members.DbSizeInUse-refs.DbSizeInUse)/sizeMembers, "in-use-bytes/member")
	}
}

// dbSize compacts etcd's history up to now, defragments the member and
// returns its status.
func dbSize(b *testing.B, cli *clientv3.Client, endpoint string) *clientv3.StatusResponse {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cli.Compact(ctx, st.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		b.Fatal(err)
	}
	if _, err := cli.Defragment(ctx, endpoint); err != nil {
		b.Fatal(err)
	}
	if st, err = cli.Status(ctx, endpoint); err != nil {
		b.Fatal(err)
	}
	return st
}
