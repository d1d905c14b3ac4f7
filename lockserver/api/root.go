package api

import "time"

// RootIdentity identifies a cluster's shared root (docs/design.md §8.19):
// its cluster file's creation time and the node that created it. Two
// roots of one cluster differ in CreatedAt; CreatedBy only names the node
// in messages.
type RootIdentity struct {
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by,omitempty"`
}

// Equal reports whether r and o are the same root.
func (r *RootIdentity) Equal(o *RootIdentity) bool {
	return r != nil && o != nil && r.CreatedAt.Equal(o.CreatedAt)
}

func (r *RootIdentity) String() string {
	if r == nil {
		return "none"
	}
	s := "created " + r.CreatedAt.UTC().Format(time.RFC3339Nano)
	if r.CreatedBy != "" {
		s += " by node " + r.CreatedBy
	}
	return s
}
