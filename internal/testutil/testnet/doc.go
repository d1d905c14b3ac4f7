// Package testnet holds network helpers shared by the tests and the
// benchmarks: a listener that counts the connections it accepts, to
// assert (or report) that clients reuse their connections; and a TCP
// relay that a test can black-hole, to partition a process from a peer.
package testnet
