package e2e

import "testing"

// alongside lets t run at the same time as the other tests that call it
// (t.Parallel: after every other test, at most -parallel at once, which
// is GOMAXPROCS, and 4 under make e2e: E2E_PARALLEL; 1 runs the suite one
// test at a time again). It is for the long tests
// whose time goes mostly to waiting (restarts, lapses, a throttled
// registry) and that:
//   - assert no wall-clock bound another test's load could break: their
//     checks are invariants (every listed blob reads back, each blob
//     downloaded once, nothing left) with generous time-outs;
//   - use nothing of the machine's but their own directories, ports and
//     processes, an etcd cluster of their own among them (not glusterd,
//     CRI's /run/containerd or runc).
//
// The tests that time a rule (a takeover within TTL + download, a
// hand-off bound, a failover's) run alone.
func alongside(t *testing.T) {
	t.Helper()
	t.Parallel()
}
