package contentv2

import (
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"
)

func TestDigestFromRef(t *testing.T) {
	hex := "6f0d1c6b8e0b0b6a48a9d3ab1fbbd4b8f1fce0a1c1e8b0c8b0c8e1a1c1e8b0c8"
	d := digest.Digest("sha256:" + hex)
	for _, tc := range []struct {
		ref  string
		want digest.Digest
	}{
		{"default/1/layer-sha256:" + hex, d},
		{"k8s.io/12/manifest-sha256:" + hex, d},
		{"default/3/index-sha256:" + hex, d},
		{"moby/40/config-sha256:" + hex, d},
		{"layer-sha256:" + hex, d},
		{"sha256:" + hex, d},
		{"default/1/unknown-sha256:" + hex, d},
		{"default/1/my-upload", ""},
		{"default/1/layer-sha256:abc", ""}, // not a valid sha256
		{"default/1/layer-sha256:" + hex + "x", ""},
		{"default/1/layersha256:" + hex, ""}, // no separator: not a digest
		{"", ""},
		{"default/1/", ""},
		{"default/1/layer-sha512:" + hex, ""}, // wrong length for sha512
	} {
		t.Run(tc.ref, func(t *testing.T) {
			require.Equal(t, tc.want, digestFromRef(tc.ref))
		})
	}
}
