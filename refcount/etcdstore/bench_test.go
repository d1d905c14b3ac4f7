package etcdstore_test

import (
	"fmt"
	"testing"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// BenchmarkCommit: one guarded Commit to a real 3-member cluster (started
// with --unsafe-no-fsync, so without the disk's flush), of one reference,
// and of a group of 64 (128 writes, etcd's default limit).
func BenchmarkCommit(b *testing.B) {
	c := etcdtest.Start(b, etcdtest.Options{})
	l := newLeaders(c.Client(b))
	for _, size := range []int{1, 64} {
		b.Run(fmt.Sprintf("refs=%d", size), func(b *testing.B) {
			s := l.campaign(b, fmt.Sprintf("/bench/%d/", size), etcdstore.Options{})
			i := 0
			for b.Loop() {
				batch := new(refcount.Batch)
				for n := range size {
					batch.AddRef(fmt.Sprintf("r%d", i), fmt.Sprintf("n%d", n))
				}
				i++
				if err := s.Commit(b.Context(), batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
