package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"text/tabwriter"
	"time"

	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// forgetSelection is what `node forget` without an ID forgets: the
// members that are not live and match every filter given.
type forgetSelection struct {
	match        string        // glob on the node ID (path.Match); "" any
	notSeenSince time.Duration // last seen at least this long ago; 0 any
	bystanders   bool          // only bystanders (docs/design.md §10)
}

func (s forgetSelection) empty() bool { return s.match == "" && s.notSeenSince == 0 && !s.bystanders }

// check refuses a bad pattern before anything is asked.
func (s forgetSelection) check() error {
	if _, err := path.Match(s.match, ""); err != nil {
		return fmt.Errorf("node forget --match %q: %w", s.match, err)
	}
	if s.notSeenSince < 0 {
		return fmt.Errorf("node forget --not-seen-since %s: must not be negative", s.notSeenSince)
	}
	return nil
}

// selects reports whether n is to be forgotten, at now.
func (s forgetSelection) selects(n api.NodeStatus, now time.Time) bool {
	if n.Live || (s.bystanders && !n.Bystander) {
		return false
	}
	if ok, _ := path.Match(s.match, n.NodeID); s.match != "" && !ok {
		return false
	}
	if s.notSeenSince > 0 {
		seen, err := time.Parse(time.RFC3339Nano, n.LastSeen)
		if err != nil || now.Sub(seen) < s.notSeenSince {
			return false
		}
	}
	return true
}

// forgetReport is what `node forget` without an ID did (or, dry, would do).
type forgetReport struct {
	DryRun    bool     `json:"dry_run"`
	Forgotten []string `json:"forgotten"`
	// Failed maps a node to why it was not forgotten (it came back, ...).
	Failed map[string]string `json:"failed,omitempty"`
}

// forgetNodes forgets one node (id set) or the members sel selects, one
// DELETE /nodes/{id} each; dry only lists them.
func forgetNodes(ctx context.Context, c *lockclient.Client, id string, sel forgetSelection, dry bool, p printer, out io.Writer) error {
	switch {
	case id != "" && (!sel.empty() || dry):
		return errors.New("node forget: give a node ID, or --match / --not-seen-since / --bystanders (with --dry-run), not both")
	case id != "":
		err := c.Forget(ctx, id)
		if errors.Is(err, api.ErrNotFound) {
			// Forgotten already (a forget run again after an interrupted
			// one), or never a member: the state asked for holds.
			fmt.Fprintf(out, "node %s is no member: nothing to forget, nothing changed\n", id)
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "forgot node %s; its references are dropped (the reaper reclaims what nobody else uses)\n", id)
		return nil
	case sel.empty():
		return errors.New("node forget: give a node ID, or select members with --match GLOB, --not-seen-since DURATION or --bystanders")
	}
	if err := sel.check(); err != nil {
		return err
	}
	resp, err := c.Nodes(ctx)
	if err != nil {
		return err
	}
	rep := forgetReport{DryRun: dry, Forgotten: []string{}}
	now := time.Now()
	for _, n := range resp.Nodes {
		if !sel.selects(n, now) {
			continue
		}
		if !dry {
			if err := c.Forget(ctx, n.NodeID); err != nil {
				if rep.Failed == nil {
					rep.Failed = map[string]string{}
				}
				rep.Failed[n.NodeID] = err.Error()
				continue
			}
		}
		rep.Forgotten = append(rep.Forgotten, n.NodeID)
	}
	err = p.print(rep, func(tw *tabwriter.Writer) {
		verb := "forgot"
		if dry {
			verb = "would forget (dry run: nothing changed)"
		}
		fmt.Fprintf(tw, "%s %d node(s); their references are dropped\n", verb, len(rep.Forgotten))
		for _, n := range rep.Forgotten {
			fmt.Fprintf(tw, "  %s\n", n)
		}
		for n, why := range rep.Failed {
			fmt.Fprintf(tw, "  not forgotten: %s: %s\n", n, why)
		}
	})
	if err == nil && len(rep.Failed) > 0 {
		err = fmt.Errorf("node forget: %d of %d selected node(s) not forgotten", len(rep.Failed), len(rep.Failed)+len(rep.Forgotten))
	}
	return err
}
