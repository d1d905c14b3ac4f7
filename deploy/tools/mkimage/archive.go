package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// writeArchive writes idx as an OCI layout tarball to w: index.json names
// it ref (a full name, NAME:TAG) for containerd and by its tag for other
// tools. Entries are sorted, owned by 0:0 and dated mtime.
func writeArchive(w io.Writer, idx v1.ImageIndex, ref string, mtime time.Time) error {
	tag := ref[strings.LastIndex(ref, ":")+1:]
	if tag == ref || strings.Contains(tag, "/") {
		return fmt.Errorf("image name %q: want NAME:TAG", ref)
	}
	dir, err := os.MkdirTemp("", "mkimage-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		annRefName:        tag,
		annContainerdName: fullName(ref),
	})); err != nil {
		return err
	}
	return tarDir(w, dir, mtime)
}

// fullName is ref as containerd and the kubelet name images: with its
// registry, docker.io/library/ for a short name ("sharedcontent:v1" is
// docker.io/library/sharedcontent:v1), so that an image imported with
// ctr -n k8s.io images import is the one a pod's image: names.
func fullName(ref string) string {
	domain, rest, ok := strings.Cut(ref, "/")
	if !ok || (!strings.ContainsAny(domain, ".:") && domain != "localhost") {
		domain, rest = "docker.io", ref
	}
	if domain == "docker.io" && !strings.Contains(rest, "/") {
		rest = "library/" + rest
	}
	return domain + "/" + rest
}

// tarDir writes the tree under dir to w in lexical order (fs.WalkDir's),
// with fixed owners, modes and times.
func tarDir(w io.Writer, dir string, mtime time.Time) error {
	tw := tar.NewWriter(w)
	err := fs.WalkDir(os.DirFS(dir), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." {
			return err
		}
		h := &tar.Header{Name: name, ModTime: mtime, Format: tar.FormatPAX}
		switch {
		case d.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, name+"/", 0o755
			return tw.WriteHeader(h)
		case d.Type().IsRegular():
			f, err := os.Open(filepath.Join(dir, name))
			if err != nil {
				return err
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return err
			}
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, st.Size()
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			return err
		default:
			return fmt.Errorf("%s: not a file or directory", name)
		}
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// readArchive unpacks an OCI layout tarball into a new directory under
// tmp and returns the one image index it names.
func readArchive(file, tmp string) (v1.ImageIndex, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			return nil, fmt.Errorf("%s: entry %q leaves the layout", file, h.Name)
		}
		dst := filepath.Join(tmp, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return nil, err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return nil, err
			}
			out, err := os.Create(dst)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%s: entry %q is not a file or directory", file, h.Name)
		}
	}
	outer, err := layout.ImageIndexFromPath(tmp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	m, err := outer.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("%s: want one image index in index.json, have %d entries", file, len(m.Manifests))
	}
	return outer.ImageIndex(m.Manifests[0].Digest)
}
