// Package e2e runs the whole product the way operators use it: real
// containerd daemons (built from the version pinned in integration/tools),
// each with the containerd-sharedcontent proxy plugin, sharing one content
// directory and one sharedcontent-lockserver, driven with ctr against an
// in-process OCI registry that counts blob downloads.
//
// The tests need root and are opt-in: they skip unless SHAREDCONTENT_E2E=1
// (set by `make e2e`), so `go test ./...` stays fast. See docs/e2e.md.
package e2e
