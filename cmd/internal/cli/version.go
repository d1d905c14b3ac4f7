package cli

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/sharedcontent/sharedcontent/internal/version"
)

// VersionFlag prints the binary's version and exits, in a flag set that
// defines it (DefineVersion): Parse prints and returns flag.ErrHelp. It
// is read from the command line only, never from the environment or the
// TOML file.
const VersionFlag = "version"

// versionOut receives --version's line.
var versionOut io.Writer = os.Stdout

// DefineVersion defines VersionFlag on fs.
func DefineVersion(fs *flag.FlagSet) {
	fs.Bool(VersionFlag, false, "print the version (and revision, Go version) and exit")
}

// PrintVersion writes "NAME VERSION (revision REVISION, GOVERSION)".
func PrintVersion(w io.Writer, name string) {
	fmt.Fprintln(w, name, version.Get())
}

// versionAsked reports whether fs defines VersionFlag and the command
// line set it.
func versionAsked(fs *flag.FlagSet) bool {
	f := fs.Lookup(VersionFlag)
	return f != nil && f.Value.String() == "true"
}
