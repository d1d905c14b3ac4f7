package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// A copy of every pin is kept in the shared root, <root>/.sharedcontent/
// pins/<name>.json, so that a coordinator that lost its database gets the
// pins back when an operator adopts the root (docs/design.md §8.10,
// §8.21): `pin add` writes it (it reads the root anyway), `pin rm` with
// --root removes it, and `cluster adopt` puts every unexpired one again,
// before it adopts (so that no member's sync lets a delete of a blob only a
// pin held go meanwhile).
// The coordinator's record is the pin; the root's copy only restores it.
// A copy `pin rm` left behind (no --root) brings the pin back at an
// adoption: the safe side, a blob kept.

// pinsDir is the root's directory of pin copies.
func pinsDir(root string) string { return filepath.Join(root, contentv2.MetaDir, "pins") }

// savePinCopy writes p's copy into root (aside, then renamed).
func savePinCopy(root string, p api.Pin) error {
	dir := pinsDir(root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+p.Name+"-*")
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, p.Name+".json"))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("keeping a copy of pin %s in the root (%s): %w", p.Name, dir, err)
	}
	return nil
}

// dropPinCopy removes pin name's copy from root; none is no error.
func dropPinCopy(root, name string) error {
	err := os.Remove(filepath.Join(pinsDir(root), name+".json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the root's copy of pin %s: %w", name, err)
	}
	return nil
}

// restorePins puts every unexpired pin copy of root at the coordinator
// (before `cluster adopt` adopts the root). A pin that cannot be put (its blobs were deleted
// meanwhile, a bad copy) is reported and the others are still put.
func restorePins(ctx context.Context, c *lockclient.Client, root string, out io.Writer) error {
	entries, err := os.ReadDir(pinsDir(root))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var restored, failed []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		var p api.Pin
		b, err := os.ReadFile(filepath.Join(pinsDir(root), e.Name()))
		if err == nil {
			err = json.Unmarshal(b, &p)
		}
		if err == nil && p.Expires != nil && !p.Expires.After(time.Now()) {
			continue // expired: the coordinator would have dropped it
		}
		if err == nil {
			p.Name = name
			_, err = c.PutPin(ctx, p)
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		restored = append(restored, name)
	}
	if len(restored) > 0 {
		fmt.Fprintf(out, "restored %d pin(s) from the root's copies: %s\n", len(restored), strings.Join(slices.Sorted(slices.Values(restored)), ", "))
	}
	if len(failed) > 0 {
		return fmt.Errorf("cluster adopt: %d pin(s) of the root not restored (run `pin add` for them again): %s", len(failed), strings.Join(failed, "; "))
	}
	return nil
}
