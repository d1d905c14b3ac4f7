package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// `top` (docs/design.md §5.10): the cluster's in-flight downloads, from
// the coordinator's pull locks held now (GET /locks/held, admin): each
// blob, the node downloading it, since when, and the nodes waiting for
// it; with --root, the bytes the holder's ingest holds so far. In a
// terminal it redraws every --interval until interrupted; with --once,
// -o json, or when the output is not a terminal, it prints once.

// topWaitersShown bounds the waiters named in a table row.
const topWaitersShown = 3

// download is one in-flight download.
type download struct {
	Blob   string    `json:"blob"`
	Holder string    `json:"holder"`
	Since  time.Time `json:"since"`
	// Waiters counts the nodes waiting for it; WaiterNodes names the
	// first of them (api.StatusQueueHead at most), in queue order.
	Waiters     int      `json:"waiters"`
	WaiterNodes []string `json:"waiter_nodes"`
	// Bytes is what the holder's ingest holds (with --root; nil without,
	// or when its ingest is not found).
	Bytes *int64 `json:"bytes,omitempty"`
}

// topReport is one look at the downloads.
type topReport struct {
	At        time.Time  `json:"at"`
	Downloads []download `json:"downloads"`
	// Total counts the downloads in flight; Downloads lists at most
	// api.HeldLocksMax of them, oldest first.
	Total int `json:"total"`
}

// topOptions are top's own flags.
type topOptions struct {
	once     bool
	interval time.Duration
}

// top prints the downloads in flight, once or every interval.
func top(c *lockclient.Client, root string, o topOptions, p printer, out io.Writer) error {
	if root != "" {
		if err := checkRoot(root); err != nil {
			return err
		}
	}
	if o.once || p.json || !isTerminal(out) {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		r, err := lookAtDownloads(ctx, c, root)
		if err != nil {
			return err
		}
		return printTop(r, p)
	}
	if o.interval <= 0 {
		return fmt.Errorf("top: --interval %v: must be positive", o.interval)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return redraw(ctx, c, root, o.interval, p, out)
}

// clearScreen moves the cursor home and clears the terminal.
const clearScreen = "\x1b[H\x1b[2J"

// redraw draws the downloads every interval until ctx ends; an error of
// one look is drawn, and the next look tries again.
func redraw(ctx context.Context, c *lockclient.Client, root string, interval time.Duration, p printer, out io.Writer) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		r, err := lookAtDownloads(cctx, c, root)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		fmt.Fprint(out, clearScreen)
		if err != nil {
			fmt.Fprintf(out, "%s  %v\n", time.Now().Format(time.TimeOnly), err)
		} else if err := printTop(r, p); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// lookAtDownloads asks the coordinator for the downloads in flight and,
// with root, reads their holders' ingests.
func lookAtDownloads(ctx context.Context, c *lockclient.Client, root string) (topReport, error) {
	held, err := c.Downloads(ctx)
	if err != nil {
		return topReport{}, err
	}
	r := topReport{At: time.Now().UTC(), Total: held.Total, Downloads: []download{}}
	var ingests []contentv2.RootIngest
	if root != "" {
		if ingests, err = contentv2.RootIngests(root); err != nil {
			return topReport{}, fmt.Errorf("top: reading the ingests in %s: %w", root, err)
		}
	}
	for _, l := range held.Locks {
		d := download{Blob: l.ResourceID, Holder: l.Holder.NodeID, Waiters: l.QueueLength, WaiterNodes: []string{}}
		d.Since, _ = time.Parse(time.RFC3339Nano, l.Holder.AcquiredAt)
		for _, w := range l.Queue {
			d.WaiterNodes = append(d.WaiterNodes, w.NodeID)
		}
		d.Bytes = holderBytes(ingests, d.Holder, digest.Digest(d.Blob))
		r.Downloads = append(r.Downloads, d)
	}
	return r, nil
}

// holderBytes returns the length of node's ingest of blob, the longest if
// it has several (nil: none).
func holderBytes(ingests []contentv2.RootIngest, node string, blob digest.Digest) *int64 {
	var n *int64
	for _, in := range ingests {
		if in.Node == node && in.Digest == blob && (n == nil || in.Offset > *n) {
			n = &in.Offset
		}
	}
	return n
}

func printTop(r topReport, p printer) error {
	return p.print(r, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "%s  %d download(s) in flight\n", r.At.Local().Format(time.TimeOnly), r.Total)
		fmt.Fprintln(tw, "BLOB\tHOLDER\tSINCE\tBYTES\tWAITERS")
		for _, d := range r.Downloads {
			bytes := "-"
			if d.Bytes != nil {
				bytes = bytesOf(*d.Bytes)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.Blob, d.Holder, r.At.Sub(d.Since).Truncate(time.Second), bytes, waitersOf(d))
		}
		if n := r.Total - len(r.Downloads); n > 0 {
			fmt.Fprintf(tw, "(%d more not listed: the coordinator lists the %d oldest)\n", n, api.HeldLocksMax)
		}
	})
}

// waitersOf is "N (a, b, c, ...)".
func waitersOf(d download) string {
	if d.Waiters == 0 {
		return "0"
	}
	names := d.WaiterNodes[:min(len(d.WaiterNodes), topWaitersShown)]
	s := fmt.Sprintf("%d (%s", d.Waiters, strings.Join(names, ", "))
	if d.Waiters > len(names) {
		s += ", ..."
	}
	return s + ")"
}
