package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The chart's README.md has the table of its values.yaml.
func TestChartReadmeIsUpToDate(t *testing.T) {
	require.NoError(t, run("../../helm/sharedcontent", true))
}

func TestTable(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	write("values.yaml", `# The file's own comment.

# -- The image.
image:
  # -- Its repository.
  repository: sc
  # Its tag | empty: the app version.
  tag: ""
# -- Resources, one value.
resources:
  requests: {cpu: 1}
# -- Extra.
extra: []
`)
	write("README.md", "# chart\n\n<!-- values:begin -->\nold\n<!-- values:end -->\n\nafter\n")
	require.ErrorIs(t, run(dir, true), errStale)
	require.NoError(t, run(dir, false))
	b, err := os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	require.Equal(t, "# chart\n\n<!-- values:begin -->\n"+
		"| Key | Default | Description |\n| --- | --- | --- |\n"+
		"| **`image`** |  | The image. |\n"+
		"| `image.repository` | `\"sc\"` | Its repository. |\n"+
		"| `image.tag` | `\"\"` | Its tag \\| empty: the app version. |\n"+
		"| `resources` | `{\"requests\":{\"cpu\":1}}` | Resources, one value. |\n"+
		"| `extra` | `[]` | Extra. |\n"+
		"<!-- values:end -->\n\nafter\n", string(b))
	require.NoError(t, run(dir, true))

	// A value without a comment is refused, and nothing is written.
	write("values.yaml", "# -- The image.\nimage: sc\nundocumented: 1\n")
	require.ErrorContains(t, run(dir, false), "undocumented has no comment")
	b2, err := os.ReadFile(filepath.Join(dir, "README.md"))
	require.NoError(t, err)
	require.Equal(t, b, b2)
}
