package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/prefetch"
	"github.com/sharedcontent/sharedcontent/internal/registry"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// prefetchTimeout bounds a whole prefetch (a big image on a slow uplink).
const prefetchTimeout = 6 * time.Hour

// prefetchFlags are prefetch's own flags.
type prefetchFlags struct {
	registry.Options
	platforms  []string
	pinName    string
	pinExpires time.Duration
	noPin      bool
	nodeID     string // the store's node ID; "" prefetch-<hostname>
	stateDir   string // the store's journal; "" a temporary directory
}

// check refuses bad flags before anything is asked.
func (f prefetchFlags) check(root string) error {
	switch {
	case root == "":
		return fmt.Errorf("prefetch: --root is required: the shared content directory the blobs go into: %w", errdefs.ErrInvalidArgument)
	case f.noPin && (f.pinName != "" || f.pinExpires != 0):
		return fmt.Errorf("prefetch: --no-pin with --pin-name or --pin-expires: choose: %w", errdefs.ErrInvalidArgument)
	case f.pinName != "" && api.CheckPinName(f.pinName) != nil:
		return fmt.Errorf("prefetch --pin-name: %w", api.CheckPinName(f.pinName))
	case f.pinExpires < 0:
		return fmt.Errorf("prefetch --pin-expires %s: must not be negative: %w", f.pinExpires, errdefs.ErrInvalidArgument)
	}
	return checkRoot(root)
}

// prefetchReport is what prefetch did.
type prefetchReport struct {
	prefetch.Result
	Fetched int      `json:"fetched"`
	Present int      `json:"present"`
	Bytes   int64    `json:"bytes"`
	Pin     *api.Pin `json:"pin,omitempty"`
	NodeID  string   `json:"node_id"`
}

// runPrefetch downloads image into the shared root under the nodes' pull
// locks, as node f.nodeID (a contentv2 store in library mode: it waits
// for a blob another node is downloading, and a node waits for it), then
// pins it, then forgets its node, whose references the pin now holds
// (docs/design.md §5.9).
func runPrefetch(ctx context.Context, c *lockclient.Client, token, server, root, image string, f prefetchFlags, p printer, out, errOut io.Writer) (err error) {
	if err := f.check(root); err != nil {
		return err
	}
	// Interrupted, it still forgets its node (below).
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var pins pinner
	if !f.noPin {
		if pins, err = pinnerOf(c); err != nil {
			return err
		}
	}
	full, err := registry.Normalize(image)
	if err != nil {
		return err
	}
	if f.nodeID == "" {
		host, _ := os.Hostname()
		f.nodeID = "prefetch-" + or(host, "unknown")
	}
	if err := forgetLeftover(ctx, c, f.nodeID, errOut); err != nil {
		return err
	}
	if f.stateDir == "" {
		if f.stateDir, err = os.MkdirTemp("", "sharedcontent-prefetch-"); err != nil {
			return err
		}
		defer os.RemoveAll(f.stateDir)
	}
	resolver, err := registry.NewResolver(ctx, f.Options)
	if err != nil {
		return err
	}
	sc, err := storeClient(server, token, f.nodeID)
	if err != nil {
		return err
	}
	defer sc.Close()
	cs, err := contentv2.NewStore(root, f.nodeID, remote.New(sc),
		contentv2.WithMode(contentv2.LibraryMode), contentv2.WithStateDir(f.stateDir))
	if err != nil {
		return fmt.Errorf("prefetch: open the shared root %s as node %s: %w", root, f.nodeID, err)
	}
	// The node goes once the store is closed: its references are the
	// pin's now, or (no pin, a failure) nobody's, and a member that is
	// gone would pause every delete until forgotten.
	defer func() {
		cs.Close()
		if ferr := forgetClosed(context.WithoutCancel(ctx), c, f.nodeID); ferr != nil {
			err = errors.Join(err, fmt.Errorf("prefetch: forget its node %s (deletes wait for it until then): run sharedcontentctl node forget %s: %w", f.nodeID, f.nodeID, ferr))
		}
	}()

	var show func(prefetch.Event)
	var bar *progress
	if !p.json {
		bar = newProgress(out)
		show = bar.event
	}
	res, err := prefetch.Fetch(ctx, cs, resolver, full, prefetch.Options{Platforms: f.platforms, Progress: show})
	if bar != nil {
		bar.finish()
	}
	if err != nil {
		return fmt.Errorf("prefetch %s: %w", full, err)
	}
	rep := prefetchReport{Result: res, NodeID: f.nodeID}
	rep.Fetched, rep.Present, rep.Bytes = res.Counts()
	if pins != nil {
		pp := api.Pin{Name: or(f.pinName, defaultPinName(full)), Image: full, ResourceIDs: res.Digests(), Created: time.Now().UTC(), By: f.nodeID}
		if f.pinExpires > 0 {
			e := pp.Created.Add(f.pinExpires)
			pp.Expires = &e
		}
		got, err := pins.PutPin(ctx, pp)
		if err != nil {
			return fmt.Errorf("prefetch %s: pin %q: %w (the blobs are in the shared root, held by nobody)", full, pp.Name, err)
		}
		rep.Pin = &got
		if err := savePinCopy(root, got); err != nil {
			return fmt.Errorf("prefetch %s: the pin %q is recorded, but %w; an adoption of the root would not restore it", full, got.Name, err)
		}
	}
	return p.print(rep, func(tw *tabwriter.Writer) { printPrefetch(tw, rep) })
}

func printPrefetch(tw *tabwriter.Writer, rep prefetchReport) {
	fmt.Fprintf(tw, "prefetched %s (%s): %d blob(s), %s: %d downloaded (%s), %d already present; %s\n",
		rep.Ref, rep.Target.Digest, len(rep.Blobs), bytesOf(rep.Bytes), rep.Fetched, bytesOf(rep.FetchedBytes), rep.Present, rep.Took.Round(time.Millisecond))
	switch {
	case rep.Pin == nil:
		fmt.Fprintln(tw, "not pinned: the blobs stay while a node uses them; unused, the reaper reclaims them after its --reap-grace")
	case rep.Pin.Expires != nil:
		fmt.Fprintf(tw, "pinned as %q until %s\n", rep.Pin.Name, rep.Pin.Expires.Format(time.RFC3339))
	default:
		fmt.Fprintf(tw, "pinned as %q (sharedcontentctl pin rm %s ends it)\n", rep.Pin.Name, rep.Pin.Name)
	}
}

// forgetLeftover forgets a member of the prefetch's node ID that is not
// live: an earlier prefetch that stopped before it forgot its node. A
// live one is another prefetch running under the same ID. The forget is
// asked even when the ID is no member (the coordinator then answers
// NotFound and changes nothing): it proves, before anything is
// downloaded, the admin identity the end of the prefetch needs.
func forgetLeftover(ctx context.Context, c *lockclient.Client, id string, errOut io.Writer) error {
	resp, err := c.Nodes(ctx)
	if err != nil {
		return err
	}
	member := false
	for _, n := range resp.Nodes {
		member = member || n.NodeID == id
	}
	err = c.Forget(ctx, id)
	switch {
	case errors.Is(err, api.ErrNotFound) && !member:
		return nil
	case errors.Is(err, api.ErrMemberLive):
		return fmt.Errorf("prefetch: node %s is live: another prefetch runs under this ID (--node-id names another): %w", id, errdefs.ErrFailedPrecondition)
	case err != nil:
		return fmt.Errorf("prefetch: forget node %s (a prefetch forgets its node when it ends): %w", id, err)
	case member:
		fmt.Fprintf(errOut, "sharedcontentctl: forgot node %s, left by an earlier prefetch\n", id)
	}
	return nil
}

// forgetEndWait bounds how long forgetClosed waits for the closed
// store's session to end: a store that could not end it (2 s at most)
// leaves it to lapse, a session TTL (15 s by default).
const forgetEndWait = 30 * time.Second

// forgetClosed forgets the node of a store just closed, waiting while its
// session is still live.
func forgetClosed(ctx context.Context, c *lockclient.Client, id string) error {
	ctx, cancel := context.WithTimeout(ctx, forgetEndWait)
	defer cancel()
	for {
		err := c.Forget(ctx, id)
		if errors.Is(err, api.ErrNotFound) {
			return nil // no member (never joined, or forgotten already)
		}
		if !errors.Is(err, api.ErrMemberLive) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// storeClient is the prefetch store's own client, as node id, with the
// command's credentials (an admin may act as any node).
func storeClient(server, token, id string) (*lockclient.Client, error) {
	opts := []lockclient.Option{lockclient.WithNodeID(id)}
	if token != "" {
		opts = append(opts, lockclient.WithBearerToken(token))
	}
	return lockclient.New(server, opts...)
}

// pinner puts a pin at the coordinator (lockclient.Client's PutPin).
type pinner interface {
	PutPin(ctx context.Context, p api.Pin) (api.Pin, error)
}

// pinnerOf returns c as the prefetch's pinner. A variable: the tests
// record the pins asked for.
var pinnerOf = func(c *lockclient.Client) (pinner, error) { return c, nil }
