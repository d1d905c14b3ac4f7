// Package registry runs a real OCI registry (go-containerregistry's
// pkg/registry) on loopback for tests, the demo and the benchmarks. It
// counts blob downloads, can throttle them to a shared bandwidth like a
// site's uplink, and pushes generated multi-layer images.
package registry
