// Package etcdtest starts a real etcd cluster on loopback for tests: N
// members (3 by default), each an etcd process with its own free ports and
// temporary data directory, started from the binary that `make etcd`
// builds (the separate module in tools/, pinned go.etcd.io/etcd/server/v3)
// and named by $SHAREDCONTENT_ETCD (else bin/etcd at the module's root,
// where `make etcd` puts it). `make test` builds it and sets the variable;
// a test run without either fails with a message that says so, unless
// SHAREDCONTENT_SKIP_ETCD=1, which skips the tests that need etcd.
//
// A test can stop, kill and restart a member, and so lose or regain the
// cluster's quorum (docs/design.md §7).
package etcdtest
