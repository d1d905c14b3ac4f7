// Package registry resolves image references the way containerd does for
// a node (docs/design.md §5.9): containerd's docker resolver, its hosts
// directory (hosts.toml mirrors and certificates, read by containerd's own
// config.ConfigureHosts, as the CRI plugin's config_path), and the usual
// credentials: an explicit user ("--user u:p", for every host, as ctr's),
// else the docker config (~/.docker/config.json, $DOCKER_CONFIG, credential
// helpers; go-containerregistry's default keychain).
//
// ResolveDigest names the descriptor an image reference resolves to
// (prefetch and pins record it); NewResolver is the resolver a fetch uses.
package registry
