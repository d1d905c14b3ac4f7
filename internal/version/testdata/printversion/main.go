// Command printversion prints version.Get(), for version_test's builds.
package main

import (
	"fmt"

	"github.com/sharedcontent/sharedcontent/internal/version"
)

func main() {
	i := version.Get()
	fmt.Printf("%s\n%s\n%s\n", i.Version, i.Revision, i.GoVersion)
}
