package logbuf

import (
	"bytes"
	"sync"
	"testing"

	"github.com/containerd/log"
)

// Buffer is a bytes.Buffer that goroutines may write to while a test
// reads it.
type Buffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Capture sends log.L's output to a new Buffer until the test ends, then
// restores its output, formatter and level.
func Capture(t testing.TB) *Buffer {
	t.Helper()
	l := log.L.Logger
	out, formatter, level := l.Out, l.Formatter, l.GetLevel()
	t.Cleanup(func() {
		l.SetOutput(out)
		l.SetFormatter(formatter)
		l.SetLevel(level)
	})
	var b Buffer
	l.SetOutput(&b)
	return &b
}
