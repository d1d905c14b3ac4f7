package refcount

import (
	"fmt"
	"strings"
	"time"

	"github.com/containerd/errdefs"
)

// PinRecord is a pin as the coordinator stores it (docs/design.md §8.21):
// an operator-named holder of references. The references themselves are
// ordinary ones, held in the reference sets by the pin's holder ID (the
// coordinator's business); the record says which resources the pin holds,
// who made it and until when, so that a restart, a new leader or a
// replace knows what to keep and what to drop.
type PinRecord struct {
	// Name is the pin's name (the record's key).
	Name string `json:"-"`
	// Image is what the operator named (informational).
	Image       string    `json:"image,omitempty"`
	ResourceIDs []string  `json:"resource_ids"`
	Created     time.Time `json:"created"`
	// Expires is when the coordinator drops the pin; nil: never.
	Expires *time.Time `json:"expires,omitempty"`
	By      string     `json:"by,omitempty"`
}

// PutPin records the pin p under p.Name, replacing the record of that
// name if any. It writes the record only: the pin's references are added
// in the same batch by the caller.
func (b *Batch) PutPin(p PinRecord) *Batch {
	p.ResourceIDs = append([]string(nil), p.ResourceIDs...)
	if p.Expires != nil {
		e := *p.Expires
		p.Expires = &e
	}
	return b.add(Write{Kind: WritePutPin, Key: p.Name, Pin: p})
}

// DropPin drops the record of the pin name; one that is not stored is not
// an error.
func (b *Batch) DropPin(name string) *Batch {
	return b.add(Write{Kind: WriteDropPin, Key: name})
}

// checkPin refuses a pin write whose name holds NUL (a key of the etcd
// store) or a put whose resource IDs are empty or hold NUL.
func checkPin(op *Write) error {
	if strings.Contains(op.Key, "\x00") {
		return fmt.Errorf("refcount: pin %q: the name holds a NUL byte: %w", op.Key, errdefs.ErrInvalidArgument)
	}
	if op.Kind != WritePutPin {
		return nil
	}
	for _, id := range op.Pin.ResourceIDs {
		if id == "" || strings.Contains(id, "\x00") {
			return fmt.Errorf("refcount: pin %q: resource ID %q is empty or holds a NUL byte: %w", op.Key, id, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// clonePin returns a copy of p that shares nothing with it.
func clonePin(p PinRecord) PinRecord {
	p.ResourceIDs = append([]string(nil), p.ResourceIDs...)
	if p.Expires != nil {
		e := *p.Expires
		p.Expires = &e
	}
	return p
}
