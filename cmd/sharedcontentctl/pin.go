package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sharedcontent/sharedcontent/internal/registry"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// Pins (docs/design.md §8.21): `pin add` walks an image from the shared
// root (index → manifests of every platform, or of those named → config
// and layers) and records every blob it reaches as one pin at the
// coordinator; `pin ls` lists the pins, `pin rm` drops one. Every blob
// must be in the root: one missing is an error naming it, and nothing is
// pinned.

// pinOptions are `pin add`'s own flags.
type pinOptions struct {
	registry.Options // resolving an image name, as prefetch does
	name             string
	expires          time.Duration
	platforms        []string
}

// resolveImage turns an image name into the digest of its manifest (or
// index), for `pin add IMAGE`: the registry resolver prefetch uses, with
// the registry flags `pin add` shares with it (docs/design.md §5.9). A
// variable: the tests resolve without a registry.
var resolveImage = func(ctx context.Context, image string, o registry.Options) (digest.Digest, error) {
	desc, err := registry.ResolveDigest(ctx, image, o)
	return desc.Digest, err
}

// resolvePinTarget returns the digest target names: itself when it is a
// digest, else what the registry resolves the image name to.
func resolvePinTarget(ctx context.Context, target string, o registry.Options) (digest.Digest, error) {
	if d, err := digest.Parse(target); err == nil {
		return d, nil
	}
	if strings.HasPrefix(target, "sha256:") {
		return "", fmt.Errorf("pin add %q: not a digest (want sha256:<64 hex digits>): %w", target, errdefs.ErrInvalidArgument)
	}
	d, err := resolveImage(ctx, target, o)
	if err != nil {
		return "", fmt.Errorf("pin add %s: resolving the image (or pin its manifest digest: `ctr images ls` on a node shows it): %w", target, err)
	}
	return d, nil
}

// pinAdd pins the blobs of target (a digest, or an image name the
// registry resolves), found in root.
func pinAdd(ctx context.Context, c *lockclient.Client, root, target string, o pinOptions, p printer, out io.Writer) error {
	if root == "" {
		return errors.New("pin add: --root is required: the pin's blobs are read from the shared content directory")
	}
	if err := checkRoot(root); err != nil {
		return err
	}
	name := o.name
	if name == "" {
		name = defaultPinName(target)
	}
	if err := api.CheckPinName(name); err != nil {
		return fmt.Errorf("pin add --name: %w", err)
	}
	if o.expires < 0 {
		return fmt.Errorf("pin add --expires %s: must not be negative", o.expires)
	}
	var match platforms.Matcher
	if len(o.platforms) > 0 {
		ps, err := platforms.ParseAll(o.platforms)
		if err != nil {
			return fmt.Errorf("pin add --platform: %w", err)
		}
		match = platforms.Any(ps...)
	}
	d, err := resolvePinTarget(ctx, target, o.Options)
	if err != nil {
		return err
	}
	blobs, err := walkImage(ctx, root, d, match)
	if err != nil {
		return fmt.Errorf("pin add %s: %w", target, err)
	}
	pin := api.Pin{Name: name, Image: target}
	var size int64
	for _, b := range blobs {
		pin.ResourceIDs = append(pin.ResourceIDs, b.Digest.String())
		size += b.Size
	}
	if o.expires > 0 {
		e := time.Now().Add(o.expires).UTC()
		pin.Expires = &e
	}
	got, err := c.PutPin(ctx, pin)
	if err != nil {
		return err
	}
	if err := savePinCopy(root, got); err != nil {
		return fmt.Errorf("pin add: the pin is recorded, but %w; an adoption of the root would not restore it", err)
	}
	row := pinRow{Pin: got, Bytes: &size}
	return p.print(row, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "pinned %s: %d blob(s), %s, expires %s; %s\n", got.Name, len(got.ResourceIDs), bytesOf(size), expiry(got.Expires),
			"no node's GC nor the reaper removes them until `sharedcontentctl pin rm "+got.Name+"`")
	})
}

// defaultPinName makes a pin name of what `pin add` was given: a digest
// becomes "sha256-<12 hex>", an image name its characters a name may hold.
func defaultPinName(target string) string {
	if d, err := digest.Parse(target); err == nil {
		enc := d.Encoded()
		return d.Algorithm().String() + "-" + enc[:min(12, len(enc))]
	}
	b := []byte(target)
	for i, r := range b {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !ok {
			b[i] = '-'
		}
	}
	return strings.TrimLeft(string(b[:min(len(b), api.MaxPinNameLen)]), "._-")
}

// maxManifestBytes bounds what walkImage reads of a blob to learn whether
// it is a manifest or an index; a bigger blob is pinned as it is.
const maxManifestBytes = 4 << 20

// walkImage returns the blobs of the image d names in root, d's first:
// an index's manifests (those match accepts, every one when nil), a
// manifest's config and layers. A blob that is neither a manifest nor an
// index is pinned alone. Any blob missing from root is an error naming
// it.
func walkImage(ctx context.Context, root string, d digest.Digest, match platforms.Matcher) ([]ocispec.Descriptor, error) {
	top, err := rootDescriptor(root, d)
	if err != nil {
		return nil, err
	}
	provider := rootProvider{root: root}
	seen := map[digest.Digest]bool{}
	var out []ocispec.Descriptor
	var missing []string
	var walk func(desc ocispec.Descriptor) error
	walk = func(desc ocispec.Descriptor) error {
		if seen[desc.Digest] {
			return nil
		}
		seen[desc.Digest] = true
		path, err := blobPath(root, desc.Digest.String())
		if err != nil {
			return err
		}
		fi, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			missing = append(missing, fmt.Sprintf("%s (%s)", desc.Digest, desc.MediaType))
			return nil
		}
		if err != nil {
			return err
		}
		desc.Size = fi.Size()
		out = append(out, desc)
		children, err := images.Children(ctx, provider, desc)
		if err != nil {
			return fmt.Errorf("reading %s (%s) from the root: %w", desc.Digest, desc.MediaType, err)
		}
		for _, child := range children {
			if images.IsManifestType(child.MediaType) && child.Platform != nil && match != nil && !match.Match(*child.Platform) {
				continue
			}
			if err := walk(child); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(top); err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		hint := ""
		if match == nil && images.IsIndexType(top.MediaType) {
			hint = " (a node pulls its own platform only: name the platforms to pin with --platform, e.g. --platform linux/amd64)"
		}
		return nil, fmt.Errorf("%d blob(s) missing from the shared root %s: %s%s; nothing pinned: %w",
			len(missing), root, strings.Join(missing, ", "), hint, errdefs.ErrNotFound)
	}
	return out, nil
}

// rootDescriptor describes the blob d of root: its size, and its media
// type when it is a manifest or an index (what it says it is, or what its
// members show); empty otherwise.
func rootDescriptor(root string, d digest.Digest) (ocispec.Descriptor, error) {
	path, err := blobPath(root, d.String())
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return ocispec.Descriptor{}, fmt.Errorf("blob %s is missing from the shared root %s (pull the image on a node first); nothing pinned: %w", d, root, errdefs.ErrNotFound)
	}
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	desc := ocispec.Descriptor{Digest: d, Size: fi.Size()}
	if fi.Size() > maxManifestBytes {
		return desc, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return desc, err
	}
	var doc struct {
		MediaType string          `json:"mediaType"`
		Manifests json.RawMessage `json:"manifests"`
		Config    json.RawMessage `json:"config"`
		Layers    json.RawMessage `json:"layers"`
	}
	if json.Unmarshal(b, &doc) != nil {
		return desc, nil // not JSON: a layer, pinned alone
	}
	switch {
	case images.IsManifestType(doc.MediaType) || images.IsIndexType(doc.MediaType):
		desc.MediaType = doc.MediaType
	case len(doc.Manifests) > 0:
		desc.MediaType = ocispec.MediaTypeImageIndex
	case len(doc.Config) > 0 && len(doc.Layers) > 0:
		desc.MediaType = ocispec.MediaTypeImageManifest
	}
	return desc, nil
}

// rootProvider reads blobs straight from the shared root's files: it
// writes nothing there.
type rootProvider struct{ root string }

func (r rootProvider) ReaderAt(_ context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	path, err := blobPath(r.root, desc.Digest.String())
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return fileReaderAt{File: f, size: fi.Size()}, nil
}

// fileReaderAt is a content.ReaderAt of an open file.
type fileReaderAt struct {
	*os.File
	size int64
}

func (f fileReaderAt) Size() int64 { return f.size }

// pinRow is one pin as `pin ls` and `pin add` show it: Bytes are the
// bytes of its blobs in --root (nil without it), Missing those of its
// blobs absent from it.
type pinRow struct {
	api.Pin
	Bytes   *int64   `json:"bytes,omitempty"`
	Missing []string `json:"missing,omitempty"`
}

// pinList lists the pins, with their bytes in root when root is given.
func pinList(ctx context.Context, c *lockclient.Client, root string, p printer) error {
	pins, err := c.Pins(ctx)
	if err != nil {
		return err
	}
	if root != "" {
		if err := checkRoot(root); err != nil {
			return err
		}
	}
	rows := make([]pinRow, 0, len(pins))
	for _, pin := range pins {
		row := pinRow{Pin: pin}
		if root != "" {
			var n int64
			for _, id := range pin.ResourceIDs {
				path, err := blobPath(root, id)
				if err != nil {
					return err
				}
				if fi, err := os.Stat(path); err == nil {
					n += fi.Size()
				} else {
					row.Missing = append(row.Missing, id)
				}
			}
			row.Bytes = &n
		}
		rows = append(rows, row)
	}
	return p.print(rows, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "NAME\tIMAGE\tBLOBS\tBYTES\tEXPIRES\tCREATED\tBY")
		for _, r := range rows {
			size := "-"
			if r.Bytes != nil {
				size = bytesOf(*r.Bytes)
				if len(r.Missing) > 0 {
					size += fmt.Sprintf(" (%d missing)", len(r.Missing))
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Name, or(r.Image, "-"), len(r.ResourceIDs), size, expiry(r.Expires),
				r.Created.Format(time.RFC3339), or(r.By, "-"))
		}
	})
}

// pinRemove drops the pin name, and its copy in root when root is given
// (else the copy stays, and an adoption of the root restores the pin).
func pinRemove(ctx context.Context, c *lockclient.Client, root, name string, out io.Writer) error {
	err := c.DeletePin(ctx, name)
	if err != nil && (root == "" || !errors.Is(err, api.ErrNotFound)) {
		return err
	}
	if root != "" {
		if cerr := dropPinCopy(root, name); cerr != nil {
			return cerr
		}
	}
	if err != nil {
		return err
	}
	note := ""
	if root == "" {
		note = " (without --root its copy in the shared root stays: an adoption of the root would restore it)"
	}
	fmt.Fprintf(out, "dropped pin %s; its blobs go when no node uses them (the reaper waits its grace)%s\n", name, note)
	return nil
}

// expiry says when a pin expires.
func expiry(e *time.Time) string {
	if e == nil {
		return "never"
	}
	return e.Format(time.RFC3339)
}

// checkPinName refuses a `pin rm` argument that is no pin's name.
func checkPinName(args []string) error { return api.CheckPinName(args[0]) }

// platformsFlag collects --platform values (repeated, or comma-separated).
type platformsFlag struct{ into *[]string }

func (f platformsFlag) String() string {
	if f.into == nil {
		return ""
	}
	return strings.Join(*f.into, ",")
}

func (f platformsFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*f.into = append(*f.into, s) // checked by the command, naming it
		}
	}
	*f.into = slices.Compact(*f.into)
	return nil
}
