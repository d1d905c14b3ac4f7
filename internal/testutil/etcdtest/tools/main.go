// Command etcd is the etcd server the tests run (internal/testutil/etcdtest),
// built from this module's pinned go.etcd.io/etcd/server/v3 by `make etcd`.
// It is etcd's own main: the root module's main.go only calls etcdmain.Main.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
