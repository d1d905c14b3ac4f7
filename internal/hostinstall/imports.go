package hostinstall

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/pelletier/go-toml/v2"
)

// importLine is the line containerd's own default config
// (`containerd config default`, containerd 2.x) carries and a node's
// config.toml must have for DropInPath to be read.
const importLine = `imports = ["/etc/containerd/conf.d/*.toml"]`

// checkImports returns nil when containerd, reading its main config at
// the host path config, also reads the drop-in at the host path dropIn:
// some file it loads (the main one, then breadth first the files that one
// imports, as containerd 2.x's LoadConfig does) has an import that names
// dropIn or a glob matching it. containerd reads conf.d only through such
// an import: its built-in default lists conf.d, but applies imports only
// of the files it loads, and loads none when config.toml does not exist.
// The installer never edits the operator's main config; the error names
// the line to add. hostRoot is prefixed to every path read.
func checkImports(hostRoot, config, dropIn string) error {
	loaded := map[string]bool{}
	for pending := []string{config}; len(pending) > 0; {
		p := pending[0]
		pending = pending[1:]
		if loaded[p] {
			continue
		}
		loaded[p] = true
		b, err := os.ReadFile(filepath.Join(hostRoot, p))
		if errors.Is(err, fs.ErrNotExist) && p == config {
			return fmt.Errorf("containerd's config %s does not exist, so containerd reads no drop-in: create it with the two lines `version = 3` and %s (containerd's defaults otherwise), then install again: %w",
				config, importLine, errdefs.ErrFailedPrecondition)
		}
		if errors.Is(err, fs.ErrNotExist) {
			continue // an import of a missing file: containerd fails on it, not our concern here
		}
		if err != nil {
			return fmt.Errorf("reading containerd's config: %w", err)
		}
		var f struct {
			Imports []string `toml:"imports"`
		}
		if err := toml.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("containerd's config %s: %v: %w", p, err, errdefs.ErrInvalidArgument)
		}
		for _, imp := range f.Imports {
			imp = filepath.Clean(imp)
			if !filepath.IsAbs(imp) {
				imp = filepath.Join(filepath.Dir(p), imp)
			}
			if imp == dropIn {
				return nil
			}
			if !strings.Contains(imp, "*") {
				pending = append(pending, imp)
				continue
			}
			if ok, err := filepath.Match(imp, dropIn); err == nil && ok {
				return nil
			}
			matches, err := filepath.Glob(filepath.Join(hostRoot, imp))
			if err != nil {
				return fmt.Errorf("containerd's config %s: import %q: %v: %w", p, imp, err, errdefs.ErrInvalidArgument)
			}
			for _, m := range matches {
				rel, _ := filepath.Rel(hostRoot, m)
				pending = append(pending, "/"+rel)
			}
		}
	}
	return fmt.Errorf("containerd's config %s does not import %s: add the line %s at its top (before any [table]), then install again; this installer does not edit the main config: %w",
		config, dropIn, importLine, errdefs.ErrFailedPrecondition)
}
