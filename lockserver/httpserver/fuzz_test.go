package httpserver

import (
	"context"
	"errors"
	"testing"

	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// FuzzLockRequest feeds arbitrary bodies through the decoder and the
// Coordinator. Whatever the input, nothing panics, every refusal is an
// invalid-argument error, and an accepted request leaves a consistent state.
func FuzzLockRequest(f *testing.F) {
	for _, seed := range []string{
		`{"type":"pull","resource_id":"sha256:aaaa","node_id":"n1"}`,
		`{"type":"delete","resource_id":"sha256:aaaa","node_id":"n1","request_id":"r","wait":false}`,
		`{"type":"update","resource_id":"x","node_id":"n","wait":true}`,
		`{"type":"merge","resource_id":"x","node_id":"n"}`,
		`{"type":"pull","resource_id":"a\u0000b","node_id":"n"}`,
		`{"type":"pull","resource_id":"\u00ff\u0085","node_id":"n"}`,
		`{"type":"pull"}`,
		`{"type":1}`,
		`{"type":"pull","resource_id":"x","node_id":"n"}garbage`,
		`{"type":"pull","resource_id":"x","node_id":"n","extra":1}`,
		`[]`, `null`, ``, `{`,
	} {
		f.Add([]byte(seed))
	}
	l, err := lockserver.NewCoordinator(lockserver.DefaultConfig(), lockserver.Options{Refs: newTestRefs()})
	if err != nil {
		f.Fatal(err)
	}
	defer l.Close()
	f.Fuzz(func(t *testing.T, body []byte) {
		var req api.LockRequest
		if err := DecodeRequest(body, &req); err != nil {
			if !errors.Is(err, api.ErrInvalidArgument) {
				t.Fatalf("decode error is not invalid_argument: %v", err)
			}
			return
		}
		resp, err := l.Lock(context.Background(), req)
		if err != nil {
			if !errors.Is(err, api.ErrInvalidArgument) && !errors.Is(err, api.ErrInUse) && !errors.Is(err, api.ErrLocked) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		if n := btoi(resp.Acquired) + btoi(resp.Skip) + btoi(resp.Queued); n != 1 {
			t.Fatalf("response must be exactly one of acquired/skip/queued: %+v", resp)
		}
		if resp.Acquired {
			if _, err := l.Unlock(context.Background(), api.UnlockRequest{Type: req.Type, ResourceID: req.ResourceID, LeaseID: resp.LeaseID}); err != nil {
				t.Fatalf("holder cannot unlock: %v", err)
			}
		}
		if resp.Queued {
			if err := l.Cancel(context.Background(), api.CancelRequest{Type: req.Type, ResourceID: req.ResourceID, NodeID: req.NodeID, RequestID: resp.RequestID}); err != nil {
				t.Fatalf("waiter cannot cancel: %v", err)
			}
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
