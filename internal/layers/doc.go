// Package layers holds no code, only a test that keeps the module's
// packages in layers whose imports point down:
//
//	internal/…                 helpers, including test helpers (internal/testutil/…)
//	refcount, refcount/…       reference sets and their storage
//	lockserver/api             wire types
//	internal/testutil/renew    keeps a test node's session
//	lockserver                 the lock manager
//	internal/testutil/members  opens test nodes' sessions at a lock manager
//	lockserver/httpserver      the coordinator's HTTP side
//	lockserver/election        a replica's etcd election loop
//	lockserver/lockservertest  a real coordinator for tests
//	lockclient                 the coordinator's client
//	contentv2                  the content store
//	contentv2/…                its adapter to lockclient and its test helpers
//	internal/testutil/oldnode  an older node's wire shape, over that adapter
//	plugin, plugin/builtin     containerd's plugins
//	internal/hostinstall       the daemon installed as a host service
//	cmd/internal/…, cmd/…      the binaries and what they share
//	integration/…              tests only (bench/ is a module of its own, above all)
//
// The test fails when
//   - a package imports (outside its tests) a package of a higher rank, or
//     one of its own rank that is neither its parent nor its child
//     directory (refcount/storagetest may import refcount; two siblings of
//     one rank may not import each other: give one of them a rank of its
//     own in the table of layers_test.go);
//   - a package, tests included, imports integration/… or cmd/… (only
//     cmd/… may import cmd/internal/…);
//   - contentv2 imports lockclient or lockserver/… other than
//     lockserver/api (it speaks its own Coordinator interface, in the
//     coordinator's wire vocabulary), or lockserver imports net/http or fasthttp
//     (the lock manager has no HTTP type), outside their tests;
//   - a package is missing from the table: a new package must be ranked;
//   - a package is missing from README.md's parts table or docs/design.md
//     §2's (parts_test.go): a new package must be placed for the reader
//     too.
//
// Tests may import any other package: a test of lockserver may start a
// lockclient.
package layers
