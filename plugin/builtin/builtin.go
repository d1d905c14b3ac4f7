package builtin

import (
	"errors"
	"fmt"
	"os"

	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/log"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/remote"
	"github.com/sharedcontent/sharedcontent/internal/tokenfile"
	"github.com/sharedcontent/sharedcontent/lockclient"
)

// Config is the plugin's TOML configuration.
type Config struct {
	// Root is the shared content directory. Default: the plugin's root dir.
	Root string `toml:"root"`
	// NodeID names this node to the coordinator. Default: the hostname.
	NodeID string `toml:"node_id"`
	// Coordinator is the coordinator's URL, or the comma-separated URLs
	// of its replicas (the node follows the leader; docs/design.md §7).
	// Required: an in-process containerd plugin does not embed a
	// coordinator.
	Coordinator string `toml:"coordinator"`
	// LockServer is the deprecated name of Coordinator, used only when
	// Coordinator is empty.
	LockServer string `toml:"lock_server"`
	// AuthTokenFile holds the bearer token for the coordinator. It must not
	// be readable by others (chmod 600).
	AuthTokenFile string `toml:"auth_token_file"`
	// StateDir holds the node journal (docs/design.md §8.2), on this node's own disk.
	// Default: the plugin's state dir.
	StateDir string `toml:"state_dir"`
	// NodeTokenFile holds this node's own bearer token, for a coordinator
	// with --node-tokens-file (default: AuthTokenFile).
	NodeTokenFile string `toml:"node_token_file"`
	// CAFile is the CA (PEM) that signed an https coordinator's
	// certificate. Default: the system's roots.
	CAFile string `toml:"ca_file"`
	// NodeCert and NodeKey are this node's client certificate and key
	// (PEM) for a coordinator that requires mTLS; with its
	// --tls-node-identity the certificate names the node.
	NodeCert string `toml:"node_cert"`
	NodeKey  string `toml:"node_key"`
}

func init() {
	registry.Register(&plugin.Registration{
		Type:   plugins.ContentPlugin,
		ID:     "sharedcontent",
		Config: &Config{},
		InitFn: func(ic *plugin.InitContext) (any, error) {
			cfg := ic.Config.(*Config)
			if cfg.StateDir == "" {
				cfg.StateDir = ic.Properties[plugins.PropertyStateDir]
			}
			if cfg.Root == "" {
				cfg.Root = ic.Properties[plugins.PropertyRootDir]
			}
			if cfg.NodeID == "" {
				h, err := os.Hostname()
				if err != nil {
					return nil, err
				}
				cfg.NodeID = h
			}
			if cfg.Coordinator == "" && cfg.LockServer != "" {
				log.G(ic.Context).Warn("sharedcontent: the config key lock_server is deprecated, use coordinator")
				cfg.Coordinator = cfg.LockServer
			}
			if cfg.Coordinator == "" {
				return nil, errors.New("sharedcontent: coordinator is required: the coordinator's URL")
			}
			opts := []lockclient.Option{lockclient.WithNodeID(cfg.NodeID)}
			if file := or(cfg.NodeTokenFile, cfg.AuthTokenFile); file != "" {
				token, err := tokenfile.Read(file)
				if err != nil {
					return nil, err
				}
				opts = append(opts, lockclient.WithBearerToken(token))
			}
			tc, err := lockclient.TLSConfigFromFiles(cfg.CAFile, cfg.NodeCert, cfg.NodeKey)
			if err != nil {
				return nil, err
			}
			if tc != nil {
				opts = append(opts, lockclient.WithTLSConfig(tc))
			}
			client, err := lockclient.New(cfg.Coordinator, opts...)
			if err != nil {
				return nil, fmt.Errorf("sharedcontent: coordinator: %w", err)
			}
			ic.Meta.Exports["root"] = cfg.Root
			return contentv2.NewStore(cfg.Root, cfg.NodeID, remote.New(client), contentv2.WithStateDir(cfg.StateDir))
		},
	})
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
