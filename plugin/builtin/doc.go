// Package builtin registers sharedcontent as containerd's content plugin
// for custom containerd builds that import it (instead of running the
// containerd-sharedcontent proxy daemon): the store is called in-process,
// without the proxy's gRPC hop, so a pull runs at stock containerd's speed
// (docs/bench-containerd.md; integration/tools/builtin is such a build).
// The local content plugin must not be linked in or must be disabled:
// containerd's metadata store needs exactly one.
//
//	[plugins."io.containerd.content.v1.sharedcontent"]
//	  root = "/mnt/shared/content"
//	  node_id = "node-1"
//	  coordinator = "http://coordinator:8642"
//
// The key lock_server is the deprecated name of coordinator.
package builtin
