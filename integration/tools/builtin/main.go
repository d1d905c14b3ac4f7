// Command containerd is containerd with sharedcontent compiled in
// (plugin/builtin): the content store is called in-process, without the
// proxy's gRPC hop. `make bench-containerd` builds it, and containerd's
// own cmd/containerd at the same version as its stock peer, to measure
// what that hop costs a pull. It is a benchmark tool, not a supported
// deployment: see README.md "Compiled into containerd".
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/containerd/containerd/v2/cmd/containerd/command"

	_ "github.com/containerd/containerd/v2/cmd/containerd/builtins"
	_ "github.com/sharedcontent/sharedcontent/plugin/builtin"
)

func main() {
	if err := command.App().Run(context.Background(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "containerd:", err)
		os.Exit(1)
	}
}
