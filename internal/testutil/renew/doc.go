// Package renew keeps a simulated node's coordinator session live in the
// benchmarks, as the node's daemon does: the coordinator records a use (a
// pull's unlock with success, POST /refs/add) only for a node with a live
// session (docs/design.md §8.4). A daemon renews its session in the
// background every third of the TTL, never in a pull's path, so a
// benchmark renews between its measurements.
package renew
