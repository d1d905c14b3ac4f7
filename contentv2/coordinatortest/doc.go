// Package coordinatortest is the contract of contentv2.Coordinator: one
// suite of behaviours that every implementation must show, run against
// the real coordinator (contentv2/remote over loopback HTTP to a
// lockserver) and against contentv2's in-memory fake, so that the fake the
// store's unit tests use cannot drift from the coordinator it stands for.
// The real coordinator is the truth: where the two disagree, the fake is
// wrong.
//
// The suite covers what the store relies on (docs/design.md §3, §8):
// sessions and syncs, a restart, references, the grant, queue and skip of
// locks (across their types too), the delete rule, delete completions,
// reap deletes, members, and the error class of each refusal. A cluster
// that can restart implements Restarter.
package coordinatortest
