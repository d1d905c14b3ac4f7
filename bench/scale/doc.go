// Package scale is the scale benchmark of docs/design.md §10:
// the real sharedcontent-lockserver binary, started on loopback with a
// temporary data directory, against N simulated nodes in this one
// process. Each node has its own node ID, its own session (renewed every
// TTL/3, and its journal synced when the coordinator asks, as contentv2's
// session loop does, through the contentv2/remote adapter), and its own
// HTTP clients, whose connections leave from the node's own loopback
// address 127.x.y.z (Linux routes all of 127/8 to lo), so the
// coordinator's per-address limits see N clients.
//
// Scenarios:
//   - rollout: every node pulls the same 10-blob image at once, each node
//     a contentv2 store (store.go) with the product's deadlines over one
//     shared root on tmpfs, fetching each blob as containerd does
//     (fetch.go): the first holder "downloads" (a fixed delay, then the
//     blob's bytes) and commits, the followers wait in Status, are woken
//     and use the blob; what the stores did after a call without an
//     answer, and each blob's downloads, are counted (acts.go);
//   - steady: the nodes only renew their sessions for a while;
//   - restart: every node has R references synced, then the coordinator
//     is killed and restarted on the same data directory and every node
//     notices the new epoch and syncs its journal again.
//
// Run figures the coordinator's CPU (utime+stime from /proc), peak RSS
// (VmHWM), open descriptors, the event streams open (counted by the
// nodes' clients), answers by kind (time-outs, 503, 429, other), the bytes
// the nodes read from it, latencies, and the longest time any node went
// without a session answer. `make bench-scale` runs the full set,
// `make bench-scale-short` a short one that fails when an invariant
// breaks.
package scale
