package contentv2

import (
	"encoding/binary"
	"testing"

	"github.com/opencontainers/go-digest"
)

// BenchmarkJournalAdd is the node journal's part of a pull that needs the
// coordinator: one bbolt transaction, synced, on the state dir's disk.
func BenchmarkJournalAdd(b *testing.B) {
	j, err := openJournal(b.TempDir(), "")
	if err != nil {
		b.Fatal(err)
	}
	defer j.close()
	var buf [8]byte
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		binary.LittleEndian.PutUint64(buf[:], uint64(i))
		if err := j.add(digest.FromBytes(buf[:])); err != nil {
			b.Fatal(err)
		}
	}
}
