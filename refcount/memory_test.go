package refcount_test

import (
	"testing"

	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/storagetest"
)

func newMemoryStorage(t *testing.T) refcount.Storage {
	s := refcount.NewMemoryStorage()
	t.Cleanup(func() { s.Close() })
	return s
}

func TestMemoryStorage(t *testing.T) {
	storagetest.Run(t, newMemoryStorage, storagetest.TakeOverLocal)
}
