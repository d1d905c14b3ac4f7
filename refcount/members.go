package refcount

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
)

// membersBucket maps a node ID to its JSON Member record.
var membersBucket = []byte("members")

// Member is a node of the cluster as the coordinator persists it (SPEC §8):
// a node is a member from its first session until it is forgotten.
type Member struct {
	ID        string    `json:"node_id"`
	FirstSeen time.Time `json:"first_seen"`
	// LastSeen is the last time the node held a session, written at most
	// every few minutes (the coordinator knows the exact time in memory).
	LastSeen time.Time `json:"last_seen"`
	// Generation is the journal generation the coordinator last received
	// a full sync from (SPEC §8, "Journal generation"): a sync from
	// another one only adds references.
	Generation string `json:"generation,omitempty"`
}

// MemberStore persists the cluster's members next to their references, in
// the same database: a coordinator that loses one loses both. It is safe
// for concurrent use; a mutation is durable when it returns.
type MemberStore interface {
	// ListMembers returns every member, in ID order.
	ListMembers(ctx context.Context) ([]Member, error)
	// PutMember creates or replaces the member m.ID.
	PutMember(ctx context.Context, m Member) error
	// DeleteMember forgets a member; an unknown one is not an error.
	DeleteMember(ctx context.Context, id string) error
}

var _ MemberStore = (*BoltStorage)(nil)

// ListMembers implements MemberStore.
func (s *BoltStorage) ListMembers(ctx context.Context) ([]Member, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Member
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(membersBucket).ForEach(func(k, v []byte) error {
			var m Member
			if err := json.Unmarshal(v, &m); err != nil {
				return fmt.Errorf("member %s: decode: %w: %w", k, errdefs.ErrDataLoss, err)
			}
			m.ID = string(k)
			out = append(out, m)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	return out, nil
}

// PutMember implements MemberStore.
func (s *BoltStorage) PutMember(ctx context.Context, m Member) error {
	return s.Commit(ctx, new(Batch).PutMember(m))
}

// DeleteMember implements MemberStore.
func (s *BoltStorage) DeleteMember(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil || id == "" {
		return err
	}
	return s.Commit(ctx, new(Batch).DeleteMember(id))
}
