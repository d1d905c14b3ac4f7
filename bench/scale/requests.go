package scale

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// Request kinds the nodes send, counted by path (the attempts, as
// answers counts them): what a storm is made of.
const (
	reqLock = iota
	reqUnlock
	reqStatus
	reqAdd
	reqSession
	reqSync
	reqEvents
	reqCancel
	reqKeepalive
	reqOther
	reqKinds
)

var reqKindNames = [reqKinds]string{"lock", "unlock", "status", "add", "session", "sync", "events", "cancel", "keepalive", "other"}

// Requests counts requests by kind.
type Requests [reqKinds]int64

// requestCounts is answers' live count by kind.
type requestCounts [reqKinds]atomic.Int64

func (c *requestCounts) note(method, path string) {
	k := reqOther
	switch {
	case path == "/lock":
		k = reqLock
	case path == "/unlock":
		k = reqUnlock
	case path == "/lock/status":
		k = reqStatus
	case path == "/refs/add":
		k = reqAdd
	case strings.HasPrefix(path, "/nodes/session"):
		k = reqSession
	case strings.HasPrefix(path, "/nodes/") && strings.HasSuffix(path, "/refs") && method == "PUT":
		k = reqSync
	case path == "/lock/events":
		k = reqEvents
	case path == "/lock/cancel":
		k = reqCancel
	case path == "/lock/keepalive":
		k = reqKeepalive
	}
	c[k].Add(1)
}

func (c *requestCounts) snapshot() Requests {
	var r Requests
	for i := range c {
		r[i] = c[i].Load()
	}
	return r
}

func (r Requests) sub(o Requests) Requests {
	for i := range r {
		r[i] -= o[i]
	}
	return r
}

// Total is every request counted.
func (r Requests) Total() int64 {
	var t int64
	for _, n := range r {
		t += n
	}
	return t
}

// String lists the kinds that occurred: "lock 7,800, status 2,400, …".
func (r Requests) String() string {
	var s []string
	for i, n := range r {
		if n != 0 {
			s = append(s, fmt.Sprintf("%s %d", reqKindNames[i], n))
		}
	}
	if len(s) == 0 {
		return "-"
	}
	return fmt.Sprintf("%d: %s", r.Total(), strings.Join(s, ", "))
}
