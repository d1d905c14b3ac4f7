package registry

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPushCountThrottle(t *testing.T) {
	r, err := Start(WithBandwidth(4 << 20))
	require.NoError(t, err)
	defer r.Close()
	img, err := r.PushRandom(context.Background(), "test/img:v1", 2, 1<<20)
	require.NoError(t, err)
	require.Len(t, img.Blobs(), 4)
	require.Greater(t, img.Size(), int64(2<<20))
	r.ResetCounters()

	start := time.Now()
	l := img.Layers[0]
	resp, err := http.Get("http://" + r.Host + "/v2/test/img/blobs/" + l.Digest.String())
	require.NoError(t, err)
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, l.Size, n)
	require.Equal(t, map[string]int{l.Digest.String(): 1}, r.BlobGets())
	require.Equal(t, l.Size, r.BlobBytes())
	// 1 MiB at 4 MiB/s with a 64 KiB burst takes at least ~200 ms.
	require.Greater(t, time.Since(start), 150*time.Millisecond)
}
