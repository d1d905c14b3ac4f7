// Package plugin serves a sharedcontent store to containerd as a proxy
// plugin: containerd's content gRPC API (contentserver) on a unix socket
// that containerd's [proxy_plugins] stanza points at (SPEC §6). Package
// plugin/builtin registers the store in-process instead, for custom
// containerd builds.
package plugin
