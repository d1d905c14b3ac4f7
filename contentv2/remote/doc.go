// Package remote adapts a lockclient.Client, remote over HTTP or embedded
// in-process, to contentv2.Coordinator (docs/design.md §5.8): New returns
// the Coordinator a contentv2.Store uses. It translates the store's calls
// into lockclient's (the coordinator's refusals, lockserver/api's
// sentinels, pass through as they are), and is the only place where
// contentv2 meets lockclient.
package remote
