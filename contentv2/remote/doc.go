// Package remote adapts a lockclient.Client, of a coordinator over HTTP
// or an embedded one, to contentv2's Coordinator: it maps contentv2's
// requests to the coordinator's wire types and lockclient's refusals to
// contentv2's sentinels, and sends a sync's journal in chunks.
package remote
