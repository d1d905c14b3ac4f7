// Package prefetch downloads an image's blobs into a content store
// (docs/design.md §5.9): the index or manifest a reference resolves to,
// the manifests of the platforms asked for (all by default), their
// configs and layers, each through containerd's own fetch
// (core/remotes.Fetch), which verifies its digest at commit.
//
// sharedcontentctl prefetch hands it a contentv2 store in library mode on
// the shared root, so each blob is downloaded under the same pull lock a
// node takes: a node pulling the blob meanwhile waits for it, a blob a
// node is pulling is waited for, and one already present is only
// referenced (the store's Writer answers AlreadyExists), not downloaded.
package prefetch
