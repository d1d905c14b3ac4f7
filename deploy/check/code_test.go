package check

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot is the main module, whose code defines the metrics and flags.
const repoRoot = "../.."

// walkCode calls fn with the path (relative to repoRoot) and contents of
// every non-test Go file of the main module's code: not bench/ or
// integration/ (tests and tools), nor deploy/ or docs/.
func walkCode(t *testing.T, fn func(rel string, src []byte)) {
	t.Helper()
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		if d.IsDir() {
			switch rel {
			case ".git", ".cache", "bench", "integration", "deploy", "docs":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fn(rel, b)
		return nil
	})
	require.NoError(t, err)
}
