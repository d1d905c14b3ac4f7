package lockclient

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Pins are admin calls (docs/design.md §8.21): the client must carry the
// admin identity (WithToken of the admin token, or an admin client
// certificate); a node's is refused with api.ErrForbidden. They go over
// HTTP only: a Client of an embedded coordinator (NewEmbedded) refuses
// them with api.ErrInvalidArgument.

// PutPin records the pin p, replacing the pin of its name, and returns it
// as the coordinator recorded it (created, by, resource IDs sorted).
func (c *Client) PutPin(ctx context.Context, p api.Pin) (api.Pin, error) {
	if err := c.pinCall(p.Name); err != nil {
		return api.Pin{}, err
	}
	var resp api.Pin
	err := c.retry(ctx, call{op: "pin", id: p.Name}, func(ctx context.Context) error {
		return c.http.do(ctx, http.MethodPut, "/pins/"+p.Name, nil, p, &resp)
	})
	return resp, err
}

// Pins returns every pin, in name order.
func (c *Client) Pins(ctx context.Context) ([]api.Pin, error) {
	if c.http == nil {
		return nil, errEmbeddedPins
	}
	var resp api.PinsResponse
	err := c.retry(ctx, call{op: "pins"}, func(ctx context.Context) error {
		return c.http.do(ctx, http.MethodGet, "/pins", nil, nil, &resp)
	})
	return resp.Pins, err
}

// Pin returns the pin name; api.ErrNotFound when there is none.
func (c *Client) Pin(ctx context.Context, name string) (api.Pin, error) {
	if err := c.pinCall(name); err != nil {
		return api.Pin{}, err
	}
	var resp api.Pin
	err := c.retry(ctx, call{op: "pin", id: name}, func(ctx context.Context) error {
		return c.http.do(ctx, http.MethodGet, "/pins/"+name, nil, nil, &resp)
	})
	return resp, err
}

// DeletePin drops the pin name and its references; api.ErrNotFound when
// there is none.
func (c *Client) DeletePin(ctx context.Context, name string) error {
	if err := c.pinCall(name); err != nil {
		return err
	}
	return c.retry(ctx, call{op: "unpin", id: name}, func(ctx context.Context) error {
		return c.http.do(ctx, http.MethodDelete, "/pins/"+name, nil, nil, nil)
	})
}

var errEmbeddedPins = fmt.Errorf("lockclient: pins are admin calls over HTTP; this client is of an embedded coordinator: %w", api.ErrInvalidArgument)

// pinCall refuses a pin call this client cannot send: over no HTTP, or for
// a name that is no pin's (which also keeps the name out of the path's
// escaping).
func (c *Client) pinCall(name string) error {
	if c.http == nil {
		return errEmbeddedPins
	}
	return api.CheckPinName(name)
}
