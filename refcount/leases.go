package refcount

import (
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
)

// LeaseRecord is a granted lease as the coordinator stores it, so that
// the coordinator that starts next on the same state (a restart, a new
// leader) adopts it: its holder's keepalives and unlock go on working
// there, and new requests for the resource queue behind it
// (docs/design.md §3.7, §7.2). A pull's lease is recorded when it is
// granted and dropped when it ends; an update's only at a graceful
// hand-over (the leader's shutdown), and dropped once the adopting
// coordinator releases it.
type LeaseRecord struct {
	// ResourceID is the resource the lease locks (the record's key, with
	// LeaseID).
	ResourceID string `json:"-"`
	// Type is the lock's operation type: "pull" or "update".
	Type      string `json:"type"`
	Node      string `json:"node_id"`
	RequestID string `json:"request_id"`
	LeaseID   string `json:"lease_id"`
	Fence     uint64 `json:"fence"`
}

// PutLease records the lease l of l.ResourceID.
func (b *Batch) PutLease(l LeaseRecord) *Batch {
	return b.add(Write{Kind: WritePutLease, Key: l.ResourceID, Lease: l})
}

// DropLease drops the record of the lease leaseID of the resource; one
// that is not stored is not an error.
func (b *Batch) DropLease(resourceID, leaseID string) *Batch {
	return b.add(Write{Kind: WriteDropLease, Key: resourceID, Lease: LeaseRecord{ResourceID: resourceID, LeaseID: leaseID}})
}

// leaseKey is the key of a lease record in the stores that keep one key
// per record: the resource ID, NUL, the lease ID. NUL sorts below every
// other byte, so a resource's records are contiguous.
func leaseKey(resourceID, leaseID string) string { return resourceID + "\x00" + leaseID }

// splitLeaseKey is the reverse of leaseKey.
func splitLeaseKey(k string) (resourceID, leaseID string) {
	resourceID, leaseID, _ = strings.Cut(k, "\x00")
	return resourceID, leaseID
}

// checkLease refuses a lease write whose resource or lease ID is empty or
// holds NUL, which cannot be a part of a record's key.
func checkLease(op *Write) error {
	if op.Lease.LeaseID == "" {
		return errEmpty("lease ID")
	}
	if strings.Contains(op.Key, "\x00") || strings.Contains(op.Lease.LeaseID, "\x00") {
		return fmt.Errorf("refcount: lease %q of %q: an ID holds a NUL byte: %w", op.Lease.LeaseID, op.Key, errdefs.ErrInvalidArgument)
	}
	return nil
}
