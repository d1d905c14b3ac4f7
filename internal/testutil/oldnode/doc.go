// Package oldnode speaks to a coordinator as an older node does: the wire
// shape of the nodes before the session timing rule (main at d716c27),
// which a coordinator still serves (docs/design.md §10.7,
// docs/operations.md "Versions and upgrades"). Its Coordinator is
// contentv2's, for a contentv2 store or a test to drive, with:
//   - session requests that carry the node's and cluster's IDs only: no
//     instance ID, journal generation, echo or root claim;
//   - full syncs without steps, offsets, generation, echo or hashes: an
//     empty first chunk that announces the sync, then the journal in
//     chunks, the last one done;
//   - no end of session: the session lapses;
//   - each wait on a stream of its own (/lock/subscribe), when the
//     lockclient given was made with lockclient.WithPerRequestStreams.
//
// Locks and references go as contentv2/remote sends them, in the shape
// older nodes sent them too. The mixed-version test
// (contentv2/remote/mixed_test.go) and the scale benchmark's older nodes
// (bench/scale, -scale-old-nodes) use it.
package oldnode
