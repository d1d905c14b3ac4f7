package builtin

import (
	"errors"
	"os"

	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/internal/tokenfile"
	"github.com/sharedcontent/sharedcontent/lockclient"
)

// Config is the plugin's TOML configuration.
type Config struct {
	// Root is the shared content directory. Default: the plugin's root dir.
	Root string `toml:"root"`
	// NodeID names this node to the coordinator. Default: the hostname.
	NodeID string `toml:"node_id"`
	// LockServer is the coordinator's URL. Required: an in-process
	// containerd plugin does not embed a coordinator.
	LockServer string `toml:"lock_server"`
	// AuthTokenFile holds the bearer token for the coordinator. It must not
	// be readable by others (chmod 600).
	AuthTokenFile string `toml:"auth_token_file"`
	// StateDir holds the node journal (SPEC §8), on this node's own disk.
	// Default: the plugin's state dir.
	StateDir string `toml:"state_dir"`
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
			if cfg.LockServer == "" {
				return nil, errors.New("sharedcontent: lock_server is required")
			}
			opts := []lockclient.Option{lockclient.WithNodeID(cfg.NodeID)}
			if cfg.AuthTokenFile != "" {
				token, err := tokenfile.Read(cfg.AuthTokenFile)
				if err != nil {
					return nil, err
				}
				opts = append(opts, lockclient.WithBearerToken(token))
			}
			client, err := lockclient.New(cfg.LockServer, opts...)
			if err != nil {
				return nil, err
			}
			ic.Meta.Exports["root"] = cfg.Root
			return contentv2.NewStore(cfg.Root, cfg.NodeID, contentv2.LockService(client), contentv2.WithStateDir(cfg.StateDir))
		},
	})
}
