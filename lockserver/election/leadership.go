package election

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

// leadership is the replica's httpserver.Leadership. While it leads, every
// request also checks the watchdog's deadline itself (keepalive.go), so
// that a process resumed after a pause refuses at once, before the
// watchdog's goroutine has even run (docs/design.md §7).
type leadership struct {
	role *httpserver.StaticLeadership
	self string // this replica's advertised URL

	term atomic.Pointer[keepalive] // the leading term's keepalive; nil on a standby

	mu      sync.Mutex
	leading bool   // protected by mu
	hint    string // protected by mu: the leader's URL as last observed
	etcdErr error  // protected by mu: the last failed etcd contact, nil once one succeeded since
}

var (
	_ httpserver.Leadership     = (*leadership)(nil)
	_ httpserver.Unavailability = (*leadership)(nil)
)

func newLeadership(self string) *leadership {
	return &leadership{role: httpserver.NewStaticLeadership(false, ""), self: self}
}

// Leader implements httpserver.Leadership.
func (l *leadership) Leader() (bool, string) {
	leader, url := l.role.Leader()
	if leader {
		if k := l.term.Load(); k == nil || !k.valid() {
			return false, ""
		}
	}
	return leader, url
}

// Unavailable implements httpserver.Unavailability: while this replica's
// last contact with etcd failed, no replica can be known to lead (etcd is
// down, or this replica is cut off from it), and a replica that does not
// lead says so rather than "the leader is not known yet" (docs/design.md
// §7.2).
func (l *leadership) Unavailable() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.etcdErr == nil {
		return nil
	}
	return fmt.Errorf("no coordinator can lead: etcd is unreachable or has lost quorum (%w)", l.etcdErr)
}

// etcdContact records the outcome of a request to etcd: a failure makes
// the replica answer unavailable until a later one succeeds.
func (l *leadership) etcdContact(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.etcdErr = err
}

// Changed implements httpserver.Leadership.
func (l *leadership) Changed() <-chan struct{} { return l.role.Changed() }

// lead makes the replica answer as the leader while k's deadline holds.
func (l *leadership) lead(k *keepalive) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.term.Store(k)
	l.leading = true
	l.role.Set(true, "")
}

// standBy makes the replica answer not_leader, naming the last observed
// leader unless that was itself.
func (l *leadership) standBy() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leading = false
	if l.hint == l.self {
		l.hint = ""
	}
	l.role.Set(false, l.hint)
	l.term.Store(nil)
}

// observed records the leader's URL (from the election's key).
func (l *leadership) observed(url string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if url == l.self {
		url = ""
	}
	l.hint = url
	if !l.leading {
		l.role.Set(false, url)
	}
}
