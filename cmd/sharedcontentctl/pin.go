package main

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sharedcontent/sharedcontent/lockclient"
)

// pin is a coordinator-held reference set of an operator-named holder
// (docs/design.md §8.21), the shape of lockserver/api.Pin.
type pin struct {
	Name        string     `json:"name"`
	Image       string     `json:"image,omitempty"`
	ResourceIDs []string   `json:"resource_ids"`
	Created     time.Time  `json:"created"`
	Expires     *time.Time `json:"expires,omitempty"`
	By          string     `json:"by,omitempty"`
}

// pinner puts a pin at the coordinator (lockclient.Client's PutPin).
type pinner interface {
	PutPin(ctx context.Context, p pin) (pin, error)
}

// pinnerOf returns c's pinner, or why this build cannot pin. It is asked
// before anything is downloaded, so that a prefetch that cannot pin
// changes nothing. A variable: the tests record the pins asked for.
var pinnerOf = func(c *lockclient.Client) (pinner, error) {
	return nil, fmt.Errorf("prefetch: pins are not available in this build of sharedcontentctl; use --no-pin (the blobs then stay while a node uses them, or --reap-grace after the prefetch): %w", errdefs.ErrNotImplemented)
}
