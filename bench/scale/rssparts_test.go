package scale

import (
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRSSParts: the sampler's first sample is taken at once, and sees
// this process's own memory (64 MiB written just before) in RssAnon and
// its mapped executable in RssFile.
func TestRSSParts(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/<pid>/status")
	}
	const size = 64 << 20
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i)
	}
	p := sampleRSS(os.Getpid())
	p.end()
	anon, file := p.peaks()
	require.GreaterOrEqual(t, anon, int64(size), "RssAnon holds the bytes just written")
	require.Positive(t, file, "RssFile holds the mapped executable's pages")
	runtime.KeepAlive(buf)
	var none *rssParts
	none.end()
	a, f := none.peaks()
	require.Zero(t, a+f, "no sampler, no peaks")
}
