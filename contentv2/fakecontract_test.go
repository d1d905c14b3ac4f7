package contentv2

import (
	"testing"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// FakeContract is the fake coordinator (fakecoord_test.go) as the
// contract suite, contentv2/coordinatortest, reaches it: that suite
// imports contentv2, so it runs in the external test package
// (contract_test.go), which sees the fake only through this export.
type FakeContract struct{ c *fakeCluster }

// NewFakeContract returns a new fake cluster whose sessions last ttl.
func NewFakeContract(ttl time.Duration) FakeContract { return FakeContract{newFakeCluster(ttl)} }

// Node returns the fake as node id reaches it.
func (f FakeContract) Node(_ *testing.T, id string) Coordinator { return f.c.node(id) }

// Restart restarts the fake: a new epoch, every member unsynced.
func (f FakeContract) Restart(*testing.T) { f.c.restart() }

// Queued returns how many requests of op wait for resource.
func (f FakeContract) Queued(_ *testing.T, op api.OperationType, resource string) int {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	n := 0
	for _, w := range f.c.queues[resource] {
		if w.typ == op {
			n++
		}
	}
	return n
}
