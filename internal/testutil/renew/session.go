package renew

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Opener opens or renews a node's session: lockclient.Client.Session, or
// lockserver.Coordinator.Session with the node's ID in the request.
type Opener func(context.Context, api.SessionRequest) (api.SessionResponse, error)

// Session is one node's session at a coordinator.
type Session struct {
	open Opener
	req  api.SessionRequest
	mu   sync.Mutex
	due  time.Time // next renewal; zero: not open
}

// New returns node's session through open, not yet open.
func New(node string, open Opener) *Session {
	return &Session{open: open, req: api.SessionRequest{NodeID: node}}
}

// Renew opens the session, or renews it once a third of its TTL has
// passed since the last answer (the daemon's interval), else does
// nothing. Safe for concurrent use.
func (s *Session) Renew(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if !s.due.IsZero() && now.Before(s.due) {
		return nil
	}
	resp, err := s.open(ctx, s.req)
	if err != nil {
		return fmt.Errorf("session of node %q: %w", s.req.NodeID, err)
	}
	s.due = now.Add(time.Duration(resp.SessionTTLMs) * time.Millisecond / 3)
	return nil
}
