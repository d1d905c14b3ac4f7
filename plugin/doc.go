// Package plugin serves a sharedcontent store to containerd as proxy
// plugins on one unix socket that containerd's [proxy_plugins] stanzas point
// at (docs/design.md §6): containerd's content gRPC API (contentserver), and its Diff
// API applying layers straight from the store, so that containerd unpacks
// without reading layers back through the content proxy (docs/design.md §5.5). Package
// plugin/builtin registers the store in-process instead, for custom
// containerd builds.
package plugin
