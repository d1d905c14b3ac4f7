package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The OCI annotation keys the image and its index carry.
const (
	annSource   = "org.opencontainers.image.source"
	annRevision = "org.opencontainers.image.revision"
	annVersion  = "org.opencontainers.image.version"
	annCreated  = "org.opencontainers.image.created"
	annTitle    = "org.opencontainers.image.title"
	annRefName  = "org.opencontainers.image.ref.name"
	// annContainerdName is the name `ctr images import` gives the image.
	annContainerdName = "io.containerd.image.name"
)

// nonRootUser is the image's default user: the coordinator's. The daemon
// runs as root (securityContext runAsUser 0, or ctr run without --user).
const nonRootUser = "65532:65532"

// spec is what one build is made of.
type spec struct {
	binDir    string // binaries in binDir/<os>_<arch>/
	platforms []v1.Platform
	version   string
	revision  string
	source    string
	created   time.Time // SOURCE_DATE_EPOCH
}

// labels are the OCI labels of spec, on the config and as annotations on
// every manifest.
func (s spec) labels() map[string]string {
	return map[string]string{
		annSource:   s.source,
		annRevision: s.revision,
		annVersion:  s.version,
		annCreated:  s.created.UTC().Format(time.RFC3339),
		annTitle:    "sharedcontent",
	}
}

// parsePlatforms reads "linux/amd64,linux/arm64".
func parsePlatforms(s string) ([]v1.Platform, error) {
	var ps []v1.Platform
	for _, f := range strings.Split(s, ",") {
		os, arch, ok := strings.Cut(strings.TrimSpace(f), "/")
		if !ok || os == "" || arch == "" || strings.Contains(arch, "/") {
			return nil, fmt.Errorf("platform %q: want OS/ARCH", f)
		}
		ps = append(ps, v1.Platform{OS: os, Architecture: arch})
	}
	return ps, nil
}

// image is the image of one platform.
func (s spec) image(p v1.Platform) (v1.Image, error) {
	l, err := layer(filepath.Join(s.binDir, p.OS+"_"+p.Architecture), s.created)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", p.OS, p.Architecture, err)
	}
	created := v1.Time{Time: s.created.UTC()}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     l,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "mkimage (deploy/tools)", Comment: "sharedcontent binaries"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = created
	cf.Config = v1.Config{
		User:       nonRootUser,
		Entrypoint: []string{"/" + binDir + "sharedcontent-lockserver"},
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		WorkingDir: "/",
		Labels:     s.labels(),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, s.labels()).(v1.Image), nil
}

// index is the multi-platform image index of spec.
func (s spec) index() (v1.ImageIndex, error) {
	if len(s.platforms) == 0 {
		return nil, fmt.Errorf("no platform")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range s.platforms {
		img, err := s.image(p)
		if err != nil {
			return nil, err
		}
		p := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
	}
	return mutate.Annotations(idx, s.labels()).(v1.ImageIndex), nil
}
