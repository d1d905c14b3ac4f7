package e2e

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"
)

func TestGzipStored(t *testing.T) {
	for _, n := range []int{0, 1, 65535, 65536, 200000} {
		data := bytes.Repeat([]byte{7, 1, 9}, n)[:n]
		zr, err := gzip.NewReader(bytes.NewReader(gzipStored(data)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("n=%d: err=%v equal=%v", n, err, bytes.Equal(got, data))
		}
	}
}
