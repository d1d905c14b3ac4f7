// Package integration holds the multi-node tests: in-process nodes (each a
// contentv2 store with containerd's own metadata store on top, sharing one
// directory) pulling from a real OCI registry through a real coordinator,
// and, in integration/e2e, real containerd daemons driven with ctr.
package integration
