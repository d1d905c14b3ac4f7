package contentv2

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
)

// The host a state dir belongs to (docs/design.md §8.5). A node ID's
// lineage is its journal generation, which lives in the state dir: a
// restart keeps it, another host has another. A copy of the state dir (a
// VM cloned with it, an image baked from a running node) has the
// original's generation, though, and the coordinator cannot tell the
// clone from the original while the original is cut off. So the journal
// also records a fingerprint of the host it was made on, read from the
// hardware: the SMBIOS system UUID (/sys/class/dmi/id/product_uuid), which
// a reboot keeps, a hypervisor or cloud gives each new VM, and a container
// sees as its host's. /etc/machine-id is not used: a clone usually keeps
// it, and in a container it is the image's, which an upgrade may change.
// A journal opened on another host than its own starts a new generation
// and is no member (journal.go): under the original's node ID the
// coordinator then refuses it as another host until an operator releases
// the ID; under a node ID of its own it joins as a new node.

// hostIDSources are the files a host fingerprint is read from, in order
// of preference, each with the prefix that names its source.
var hostIDSources = []struct{ prefix, path string }{
	{"dmi", "/sys/class/dmi/id/product_uuid"},
}

// HostID returns this host's fingerprint ("source:hash"), or "" when no
// source can be read (no DMI, or not readable by this user: then a copied
// state dir is not recognised).
func HostID() string {
	for _, src := range hostIDSources {
		b, err := os.ReadFile(src.path)
		if v := strings.TrimSpace(string(b)); err == nil && v != "" {
			sum := sha256.Sum256([]byte(v))
			return src.prefix + ":" + hex.EncodeToString(sum[:16])
		}
	}
	return ""
}

// sameSource reports whether two fingerprints come from the same source:
// only those can be compared (a host whose DMI UUID became unreadable is
// not another host).
func sameSource(a, b string) bool {
	pa, _, _ := strings.Cut(a, ":")
	pb, _, _ := strings.Cut(b, ":")
	return pa == pb
}
