package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"text/tabwriter"

	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// diskUsage is what `du` computes from the shared root and the
// coordinator's references.
type diskUsage struct {
	Blobs      int              `json:"blobs"`
	Bytes      int64            `json:"bytes"`
	PerNode    map[string]int64 `json:"bytes_per_node"`
	Orphans    []blob           `json:"orphans"`
	Dangling   []string         `json:"dangling"`
	TrashFiles int              `json:"trash_files"`
	TrashBytes int64            `json:"trash_bytes"`
	// Reclaimable is what the reaper would free now: orphans and trash.
	Reclaimable int64 `json:"reclaimable_bytes"`
}

func measure(ctx context.Context, c *lockclient.Client, root string) (diskUsage, error) {
	if root == "" {
		return diskUsage{}, fmt.Errorf("--root is required: the shared content directory")
	}
	blobs, err := listBlobs(root)
	if err != nil {
		return diskUsage{}, err
	}
	// The references arrive in resource ID order, a page at a time: du
	// holds the blobs, never every reference (docs/design.md §10.3).
	u := diskUsage{PerNode: map[string]int64{}, Orphans: []blob{}, Dangling: []string{}}
	referenced := map[string]bool{}
	err = c.WalkRefs(ctx, func(e api.RefsEntry) error {
		size, ok := blobs[e.ResourceID]
		if !ok {
			u.Dangling = append(u.Dangling, e.ResourceID)
			return nil
		}
		if len(e.Nodes) > 0 {
			referenced[e.ResourceID] = true
		}
		for _, n := range e.Nodes {
			u.PerNode[n] += size
		}
		return nil
	})
	if err != nil {
		return diskUsage{}, err
	}
	for _, d := range slices.Sorted(maps.Keys(blobs)) {
		size := blobs[d]
		u.Blobs++
		u.Bytes += size
		if !referenced[d] {
			u.Orphans = append(u.Orphans, blob{Digest: d, Size: size})
			u.Reclaimable += size
		}
	}
	u.TrashFiles, u.TrashBytes, err = trashBytes(root)
	u.Reclaimable += u.TrashBytes
	return u, err
}

func du(ctx context.Context, c *lockclient.Client, root string, p printer) error {
	u, err := measure(ctx, c, root)
	if err != nil {
		return err
	}
	return p.print(u, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "shared directory\t%d blobs\t%s\n", u.Blobs, bytesOf(u.Bytes))
		for _, n := range slices.Sorted(maps.Keys(u.PerNode)) {
			fmt.Fprintf(tw, "  used by %s\t\t%s\n", n, bytesOf(u.PerNode[n]))
		}
		fmt.Fprintf(tw, "reclaimable\t%d orphans, %d in .trash\t%s\n", len(u.Orphans), u.TrashFiles, bytesOf(u.Reclaimable))
		fmt.Fprintf(tw, "dangling references\t%d\t\n", len(u.Dangling))
	})
}
