package api

import (
	"fmt"
	"strings"
	"time"
)

// Pin is a durable, operator-named holder of references
// (docs/design.md §8.21): PUT /pins/{name} (admin) records it, GET /pins
// and GET /pins/{name} read it, DELETE /pins/{name} drops it. The
// coordinator holds a reference to each of ResourceIDs by the pin's holder
// (PinHolder), so the delete rule refuses, and the reaper skips, every
// pinned blob, as for a node's reference. A pin is no node: no sync
// replaces its references, no expiry or forget of a node drops them;
// they go with the pin (DELETE, or the coordinator's sweep once Expires
// has passed).
type Pin struct {
	// Name names the pin: 1 to MaxPinNameLen letters, digits, '.', '_'
	// or '-', starting with a letter or a digit (CheckPinName). In PUT
	// /pins/{name} the path's name wins; a body naming another is
	// refused.
	Name string `json:"name"`
	// Image is what the operator named (an image reference or a digest);
	// informational.
	Image string `json:"image,omitempty"`
	// ResourceIDs are the pinned blobs' digests, as the coordinator's
	// resource IDs ("sha256:<hex>"): 1 to MaxPinBlobs of them.
	ResourceIDs []string `json:"resource_ids"`
	// Created is when the coordinator recorded the pin (set by it).
	Created time.Time `json:"created"`
	// Expires is when the coordinator drops the pin; nil: never. A PUT
	// whose Expires has passed is refused.
	Expires *time.Time `json:"expires,omitempty"`
	// By is the admin identity that recorded the pin (set by the
	// coordinator).
	By string `json:"by,omitempty"`
}

// PinsResponse is the answer to GET /pins: every pin, in name order.
type PinsResponse struct {
	Pins []Pin `json:"pins"`
}

// Limits on pins.
const (
	// MaxPinNameLen bounds a pin's name.
	MaxPinNameLen = 128
	// MaxPinBlobs bounds the blobs of one pin (an image index of every
	// platform has a few hundred; the body stays under MaxBodyBytes).
	MaxPinBlobs = 10000
)

// PinHolderPrefix starts the holder ID of a pin's references in the
// reference sets (GET /refs, /refs/list): "pin/<name>". No node ID may
// start with it (a node ID with '/' could not sync anyway).
const PinHolderPrefix = "pin/"

// PinHolder is the holder ID of pin name's references.
func PinHolder(name string) string { return PinHolderPrefix + name }

// PinName returns the name of the pin whose holder ID is holder, and
// whether holder is a pin's.
func PinName(holder string) (string, bool) { return strings.CutPrefix(holder, PinHolderPrefix) }

// CheckPinName refuses a pin name CheckPinName's rule does not allow, with
// an error matching ErrInvalidArgument that names it.
func CheckPinName(name string) error {
	if name == "" || len(name) > MaxPinNameLen {
		return fmt.Errorf("pin name %q: must be 1 to %d characters: %w", name, MaxPinNameLen, ErrInvalidArgument)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || (i > 0 && (r == '.' || r == '_' || r == '-'))
		if !ok {
			return fmt.Errorf("pin name %q: only letters, digits, '.', '_' and '-', starting with a letter or a digit: %w", name, ErrInvalidArgument)
		}
	}
	return nil
}
