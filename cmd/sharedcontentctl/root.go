package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/contentv2"
)

// blob is a file under <root>/blobs/<alg>/.
type blob struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// blobPath is where the shared root keeps dgst ("sha256:<hex>").
func blobPath(root, dgst string) (string, error) {
	d, err := digest.Parse(dgst)
	if err != nil {
		return "", fmt.Errorf("%q is not a digest (want sha256:<hex>): %w", dgst, err)
	}
	return filepath.Join(root, "blobs", d.Algorithm().String(), d.Encoded()), nil
}

// checkRoot refuses a --root that is not a directory, naming the flag.
func checkRoot(root string) error {
	if fi, err := os.Stat(root); err != nil {
		return fmt.Errorf("--root %s, the shared content directory: %w", root, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("--root %s, the shared content directory, is not a directory: %w", root, errdefs.ErrInvalidArgument)
	}
	return nil
}

// listBlobs returns every blob of the shared root, by digest.
func listBlobs(root string) (map[string]int64, error) {
	if err := checkRoot(root); err != nil {
		return nil, err
	}
	blobs := map[string]int64{}
	base := filepath.Join(root, "blobs")
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == base {
				return fs.SkipDir
			}
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(base, path)
		if err != nil {
			return err
		}
		alg, hex := filepath.Split(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		blobs[filepath.Clean(alg)+":"+hex] = fi.Size()
		return nil
	})
	return blobs, err
}

// trashBytes returns the entries and bytes under <root>/.trash.
func trashBytes(root string) (int, int64, error) {
	entries, err := os.ReadDir(filepath.Join(root, contentv2.TrashDir))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	var n int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return len(entries), n, nil
}
