package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/sharedcontent/sharedcontent/lockclient"
)

// refsReport is `refs DIGEST`: who uses a blob, and whether its file is
// there (with --root).
type refsReport struct {
	Digest string   `json:"digest"`
	Nodes  []string `json:"nodes"`
	// File is "present", "missing" or "" (no --root).
	File string `json:"file,omitempty"`
	Size int64  `json:"size,omitempty"`
}

func refs(ctx context.Context, c *lockclient.Client, root, dgst string, p printer) error {
	resp, err := c.Refs(ctx, dgst)
	if err != nil {
		return err
	}
	r := refsReport{Digest: dgst, Nodes: resp.Nodes}
	if r.Nodes == nil {
		r.Nodes = []string{}
	}
	if root != "" {
		if err := checkRoot(root); err != nil {
			return err
		}
		path, err := blobPath(root, dgst)
		if err != nil {
			return err
		}
		switch fi, err := os.Stat(path); {
		case err == nil:
			r.File, r.Size = "present", fi.Size()
		case errors.Is(err, fs.ErrNotExist):
			r.File = "missing"
		default:
			return err
		}
	}
	return p.print(r, func(tw *tabwriter.Writer) {
		nodes := strings.Join(r.Nodes, ",")
		if nodes == "" {
			nodes = "(none)"
		}
		fmt.Fprintln(tw, "DIGEST\tNODES\tFILE\tSIZE")
		file, size := r.File, ""
		if file == "" {
			file = "(no --root)"
		} else if file == "present" {
			size = bytesOf(r.Size)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Digest, nodes, file, size)
	})
}
