// Package remote adapts a lockclient.Client, remote over HTTP or embedded
// in-process, to contentv2.Coordinator (docs/design.md §5.8): New returns
// the Coordinator a contentv2.Store uses. It translates the store's
// requests into lockclient's and the coordinator's refusals (lockclient's
// sentinel errors) into contentv2's, and is the only place where contentv2
// meets lockclient and the wire types of lockserver/api.
package remote
