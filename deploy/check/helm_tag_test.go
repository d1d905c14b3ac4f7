package check

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// helmBinary is the helm make helm-check builds ($HELM), or the one an
// earlier make helm-check left in .cache/bin; "" when there is none.
func helmBinary() string {
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := filepath.Abs("../../.cache/bin/helm")
	if err != nil {
		return ""
	}
	if _, err := os.Stat(h); err != nil {
		return ""
	}
	return h
}

// TestHelmImageTag: the chart never names an image `make image` did not
// build. Its source has no appVersion to fall back on, so rendering it
// without image.tag fails and says what to give; packed by make
// helm-package (helm package --app-version IMAGE_VERSION) its default is
// the image make image tags IMAGE_VERSION, repository included.
func TestHelmImageTag(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	require.NoError(t, err)
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	require.NoError(t, yaml.Unmarshal(b, &chart))
	require.Empty(t, chart.AppVersion, "the chart's source names no build: an appVersion is an image tag make image never gives (make helm-package stamps it)")

	b, err = os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	require.NoError(t, err)
	var values struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"image"`
	}
	require.NoError(t, yaml.Unmarshal(b, &values))
	require.Empty(t, values.Image.Tag, "a default tag names one build, not the one make image made")
	mk, err := os.ReadFile("../../Makefile")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^IMAGE_NAME\s+\?= `+regexp.QuoteMeta(values.Image.Repository)+`$`, string(mk),
		"image.repository is the name make image gives the image (IMAGE_NAME)")
	require.Regexp(t, `(?m)^\s+\$\(HELM\) package \$\(CHART\) --app-version \$\(IMAGE_VERSION\) `, string(mk),
		"make helm-package stamps the chart's appVersion with the image's tag")

	helm := helmBinary()
	if helm == "" {
		t.Skip("no helm: make helm-check builds it and runs this test with it")
	}
	images := func(t *testing.T, out []byte) []string {
		t.Helper()
		m := regexp.MustCompile(`(?m)^\s+image: "?([^"\s]+)"?$`).FindAllSubmatch(out, -1)
		require.NotEmpty(t, m, "no image rendered")
		var imgs []string
		for _, s := range m {
			imgs = append(imgs, string(s[1]))
		}
		return imgs
	}
	t.Run("no tag", func(t *testing.T) {
		out, err := exec.Command(helm, "template", "sharedcontent", chartDir).CombinedOutput()
		require.Error(t, err, "rendered without image.tag:\n%s", out)
		require.Contains(t, string(out), "image.tag is required: give the tag `make image` printed")
	})
	t.Run("tag", func(t *testing.T) {
		out, err := exec.Command(helm, "template", "sharedcontent", chartDir, "--set", "image.tag=v1.2.3-4-gabcdef0").CombinedOutput()
		require.NoError(t, err, "%s", out)
		for _, img := range images(t, out) {
			require.Equal(t, "sharedcontent:v1.2.3-4-gabcdef0", img)
		}
		require.Contains(t, string(out), `app.kubernetes.io/version: "v1.2.3-4-gabcdef0"`)
	})
	t.Run("packed", func(t *testing.T) {
		dir := t.TempDir()
		const version = "v1.2.3-5-g0123456-dirty"
		mk := exec.Command("make", "--no-print-directory", "helm-package", "HELM="+helm, "IMAGE_VERSION="+version, "BIN="+dir)
		mk.Dir = "../.."
		out, err := mk.CombinedOutput()
		require.NoError(t, err, "%s", out)
		pkgs, err := filepath.Glob(filepath.Join(dir, "sharedcontent-*.tgz"))
		require.NoError(t, err)
		require.Len(t, pkgs, 1, "%s", out)
		out, err = exec.Command(helm, "template", "sharedcontent", pkgs[0]).CombinedOutput()
		require.NoError(t, err, "%s", out)
		for _, img := range images(t, out) {
			require.Equal(t, values.Image.Repository+":"+version, img)
		}
	})
}

// TestHelmDocReferences: every `docs/NAME.md "Section"` the chart prints
// or says (NOTES.txt, templates, README.md, values.yaml) names a heading
// of that page.
func TestHelmDocReferences(t *testing.T) {
	ref := regexp.MustCompile(`docs/([a-z0-9-]+\.md) \\?"([^"\\]+)\\?"`)
	heading := regexp.MustCompile(`(?m)^#+ (.+)$`)
	var files []string
	for _, g := range []string{"templates/*", "README.md", "values.yaml"} {
		m, err := filepath.Glob(filepath.Join(chartDir, g))
		require.NoError(t, err)
		files = append(files, m...)
	}
	refs := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range ref.FindAllStringSubmatch(string(b), -1) {
			refs++
			doc, err := os.ReadFile(filepath.Join("../../docs", m[1]))
			require.NoError(t, err, "%s refers to docs/%s", f, m[1])
			var headings []string
			for _, h := range heading.FindAllStringSubmatch(string(doc), -1) {
				headings = append(headings, strings.TrimSpace(h[1]))
			}
			require.Contains(t, headings, m[2], "%s refers to docs/%s %q, which has no such heading", f, m[1], m[2])
		}
	}
	require.NotZero(t, refs, "NOTES.txt points at docs/helm.md")
}
