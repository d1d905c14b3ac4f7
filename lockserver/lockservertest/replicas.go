package lockservertest

import (
	"testing"

	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

// Replica is one of the coordinators StartReplicas starts, with the
// leadership a test flips.
type Replica struct {
	*Server
	Leadership *httpserver.StaticLeadership
}

// StartReplicas starts n coordinators that act as the replicas of one
// (docs/design.md §7) with a static leadership: the first leads, the others
// are standbys that name it. Each keeps its own database: a test of the
// wire and of clients, not of shared state (the election and the etcd
// store do that). SetLeader moves the leadership.
func StartReplicas(t testing.TB, n int, opts ...Option) []*Replica {
	t.Helper()
	scheme := "http"
	if newOptions(opts).ca != nil {
		scheme = "https"
	}
	rs := make([]*Replica, n)
	addrs := make([]string, n)
	for i := range rs {
		addrs[i] = FreeAddr(t)
	}
	for i := range rs {
		lead := httpserver.NewStaticLeadership(i == 0, "")
		if i != 0 {
			lead.Set(false, scheme+"://"+addrs[0])
		}
		o := append(append([]Option(nil), opts...), WithAddr(addrs[i]),
			WithServerConfig(func(c *httpserver.Config) { c.Leadership = lead }))
		rs[i] = &Replica{Server: Start(t, o...), Leadership: lead}
	}
	return rs
}

// SetLeader makes rs[leader] lead and every other replica a standby that
// names it (leader < 0: none leads, and the standbys know no leader).
func SetLeader(rs []*Replica, leader int) {
	url := ""
	if leader >= 0 {
		url = rs[leader].URL()
	}
	// Standbys first: two leaders at once is what an election prevents.
	for i, r := range rs {
		if i != leader {
			r.Leadership.Set(false, url)
		}
	}
	if leader >= 0 {
		rs[leader].Leadership.Set(true, "")
	}
}
