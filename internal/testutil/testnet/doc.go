// Package testnet holds network helpers shared by the tests and the
// benchmarks: a listener that counts the connections it accepts, to
// assert (or report) that clients reuse their connections.
package testnet
