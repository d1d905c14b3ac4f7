package contentv2

import (
	"strings"

	"github.com/opencontainers/go-digest"
)

// digestFromRef finds the digest an ingest ref is about. containerd's
// fetch names ingests remotes.MakeRefKey-style ("layer-sha256:<hex>",
// "manifest-…", "index-…", "config-…"), and its metadata store prefixes
// them with "<namespace>/<sequence>/". Refs that name no valid digest give
// "".
func digestFromRef(ref string) digest.Digest {
	last := ref[strings.LastIndexByte(ref, '/')+1:]
	for _, alg := range []digest.Algorithm{digest.SHA256, digest.SHA384, digest.SHA512} {
		i := strings.LastIndex(last, string(alg)+":")
		if i < 0 || (i > 0 && last[i-1] != '-') {
			continue
		}
		if d := digest.Digest(last[i:]); d.Validate() == nil {
			return d
		}
	}
	return ""
}
