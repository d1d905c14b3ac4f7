package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// The containerd plugins doctor reads. Versions 2 and 3 of containerd's
// config name them alike; version 1 used short names, which doctor does
// not read.
const (
	builtinContent = "io.containerd.content.v1.content"
	// compiledIn is sharedcontent's own content plugin in a containerd
	// built with plugin/builtin.
	compiledIn      = "io.containerd.content.v1.sharedcontent"
	metadataPlugin  = "io.containerd.metadata.v1.bolt"
	diffService     = "io.containerd.service.v1.diff-service"
	transferService = "io.containerd.transfer.v1.local"
)

// containerdConfig is containerd's configuration as containerd 2.x merges
// it from its main file and the files that file imports.
type containerdConfig struct {
	Files []string
	// OldFiles are the files of version 1 (or with no version line).
	OldFiles        []string
	DisabledPlugins []string
	ProxyPlugins    map[string]proxyPlugin
	Plugins         map[string]any
}

type proxyPlugin struct {
	Type    string `toml:"type"`
	Address string `toml:"address"`
}

type containerdFile struct {
	Version         int                    `toml:"version"`
	Imports         []string               `toml:"imports"`
	DisabledPlugins []string               `toml:"disabled_plugins"`
	ProxyPlugins    map[string]proxyPlugin `toml:"proxy_plugins"`
	Plugins         map[string]any         `toml:"plugins"`
}

// loadContainerdConfig reads path and, breadth first, the files it imports,
// merged as containerd 2.x merges them (cmd/containerd/server/config):
// a relative import is relative to its importer's directory and may be a
// glob; lists such as disabled_plugins are appended; a proxy plugin of an
// imported file replaces the one of the same name; plugin tables are merged
// key by key, each value (a list, an array of tables) replaced whole.
func loadContainerdConfig(path string) (*containerdConfig, error) {
	cfg := &containerdConfig{ProxyPlugins: map[string]proxyPlugin{}, Plugins: map[string]any{}}
	loaded := map[string]bool{}
	for pending := []string{path}; len(pending) > 0; {
		p := pending[0]
		pending = pending[1:]
		if loaded[p] {
			continue
		}
		loaded[p] = true
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var f containerdFile
		if err := toml.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		cfg.Files = append(cfg.Files, p)
		if f.Version < 2 {
			cfg.OldFiles = append(cfg.OldFiles, p)
		}
		for _, d := range f.DisabledPlugins {
			if !slices.Contains(cfg.DisabledPlugins, d) {
				cfg.DisabledPlugins = append(cfg.DisabledPlugins, d)
			}
		}
		for name, pp := range f.ProxyPlugins {
			cfg.ProxyPlugins[name] = pp
		}
		mergeTables(cfg.Plugins, f.Plugins)
		for _, imp := range f.Imports {
			imp = filepath.Clean(imp)
			if !filepath.IsAbs(imp) {
				imp = filepath.Join(filepath.Dir(p), imp)
			}
			if !strings.Contains(imp, "*") {
				pending = append(pending, imp)
				continue
			}
			matches, err := filepath.Glob(imp)
			if err != nil {
				return nil, fmt.Errorf("%s: import %q: %w", p, imp, err)
			}
			pending = append(pending, matches...)
		}
	}
	return cfg, nil
}

func mergeTables(dst, src map[string]any) {
	for k, v := range src {
		sv, ok1 := v.(map[string]any)
		dv, ok2 := dst[k].(map[string]any)
		if ok1 && ok2 {
			mergeTables(dv, sv)
			continue
		}
		dst[k] = v
	}
}

// plugin returns the value at the keys under [plugins.'name'], or nil.
func (c *containerdConfig) plugin(name string, keys ...string) any {
	var v any = c.Plugins[name]
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// proxies returns the names of the proxy plugins of type typ, sorted.
func (c *containerdConfig) proxies(typ string) []string {
	var names []string
	for name, p := range c.ProxyPlugins {
		if p.Type == typ {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}
