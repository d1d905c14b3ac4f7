package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/lockclient"
)

// defaultReapGrace is the plugin's --reap-grace default.
const defaultReapGrace = time.Hour

// reapDryRun prints what a reaper pass would remove now: it runs the
// reaper's own decision (contentv2.PlanReap) and acts on nothing. A dry
// run has observed nothing before: a reference to a missing blob, and a
// member's unchanged marker, count from now, as they do for a reaper that
// has just started (the running reaper may have seen them longer).
func reapDryRun(ctx context.Context, c *lockclient.Client, root string, dry bool, grace time.Duration, p printer) error {
	if !dry {
		return errors.New("reap: only --dry-run; the nodes' reapers reclaim (--reap-interval), one at a time")
	}
	if root == "" {
		return fmt.Errorf("--root is required: the shared content directory")
	}
	if err := checkRoot(root); err != nil {
		return err
	}
	plan, err := contentv2.PlanReap(ctx, root, remote.New(c), contentv2.ReapOptions{Grace: grace}, &contentv2.ReapMemory{})
	if err != nil {
		return err
	}
	return p.print(plan, func(tw *tabwriter.Writer) { printPlan(tw, plan) })
}

func printPlan(tw *tabwriter.Writer, plan contentv2.ReapPlan) {
	fmt.Fprintln(tw, "WHAT\tWHICH\tBYTES\tWHY")
	for _, o := range plan.Orphans {
		fmt.Fprintf(tw, "orphan blob\t%s\t%s\tno node references it; %s old\n", o.Digest, bytesOf(o.Size), o.Age.Round(time.Second))
	}
	for _, d := range plan.Dangling {
		fmt.Fprintf(tw, "(kept) dangling reference\t%s\t\tno file in this view; referenced by %v: each node drops only its own, seen missing in its own view; a gone node's go with it (expiry, node forget)\n", d.Resource, d.Nodes)
	}
	for _, f := range plan.Ingests {
		fmt.Fprintf(tw, "ingest\t%s\t%s\tof %s, not a member; %s old\n", f.Path, bytesOf(f.Bytes), f.Node, f.Age.Round(time.Second))
	}
	for _, f := range plan.Markers {
		fmt.Fprintf(tw, "node marker\t%s\t\tof %s, not a member; %s old\n", f.Path, f.Node, f.Age.Round(time.Second))
	}
	for _, f := range plan.Trash {
		fmt.Fprintf(tw, "trash\t%s\t%s\t%s old\n", f.Path, bytesOf(f.Bytes), f.Age.Round(time.Second))
	}
	for _, m := range plan.Expire {
		fmt.Fprintf(tw, "expire member\t%s\t\tunheard of for %s, marker unchanged for %s\n", m.Node, m.Absent.Round(time.Second), m.MarkerUnchanged.Round(time.Second))
	}
	for _, m := range plan.Absent {
		fmt.Fprintf(tw, "(kept) absent member\t%s\t\tunheard of for %s of the coordinator's uptime; expired only when that and its marker's staleness (reported by the reaper, measured by the coordinator; a missing marker proves nothing) reach %s\n",
			m.Node, m.Absent.Round(time.Second), plan.NodeExpiry)
	}
	fmt.Fprintf(tw, "(kept) within the grace\t%d orphans, %d dangling references\t\t--reap-grace %s\n", plan.WaitingOrphans, plan.WaitingDangling, plan.Grace)
	fmt.Fprintf(tw, "unreferenced in all\t\t%s\t\n", bytesOf(plan.ReclaimableBytes))
	fmt.Fprintln(tw, "(dry run: nothing was removed; the reaper deletes blobs only while every member is synced)")
}
