package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at link time by the Makefile:
//
//	-ldflags "-X github.com/sharedcontent/sharedcontent/internal/version.version=v0.3.0-4-gabc1234
//	          -X github.com/sharedcontent/sharedcontent/internal/version.revision=abc1234..."
var version, revision string

// Unknown values, when neither the linker nor the build info gave one.
const (
	Dev            = "dev"
	UnknownCommit  = "unknown"
	modifiedSuffix = "-dirty"
)

// Header is the HTTP header of /healthz answers that carries Get().String().
const Header = "Sharedcontent-Version"

// Info is one build's identity.
type Info struct {
	// Version is a release tag ("v0.3.0"), `git describe` output
	// ("v0.3.0-4-gabc1234-dirty", or a bare abbreviated hash in a
	// repository without tags), a module version, or Dev.
	Version string
	// Revision is the full commit hash, or UnknownCommit.
	Revision string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Get returns the running binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, revision, bi)
}

// resolve prefers the linker's values, then bi's, then the defaults.
func resolve(version, revision string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Revision: revision, GoVersion: runtime.Version()}
	if bi != nil {
		info.GoVersion = bi.GoVersion
		var vcsRevision string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRevision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if info.Revision == "" {
			info.Revision = vcsRevision
		}
		if info.Version == "" {
			switch v := bi.Main.Version; {
			case v != "" && v != "(devel)":
				info.Version = v
			case vcsRevision != "":
				info.Version = shortHash(vcsRevision)
				if modified {
					info.Version += modifiedSuffix
				}
			}
		}
	}
	if info.Version == "" {
		info.Version = Dev
	}
	if info.Revision == "" {
		info.Revision = UnknownCommit
	}
	return info
}

// shortHash abbreviates a commit hash as `git describe --always` does.
func shortHash(h string) string {
	if len(h) > 7 {
		return h[:7]
	}
	return h
}

// String is "VERSION (revision REVISION, GOVERSION)".
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}
