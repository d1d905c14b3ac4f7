package lockserver

import (
	"context"
	"fmt"
	"sync"
)

// FenceStore persists the fence high-water mark. refcount's bolt storage
// implements it.
type FenceStore interface {
	GetUint64(ctx context.Context, key string) (uint64, error)
	PutUint64(ctx context.Context, key string, v uint64) error
}

const fenceKey = "fence_high_water_mark"

// fenceSource hands out strictly increasing fences. It reserves them in
// blocks: before handing out fences up to hwm it persists hwm, so after a
// restart it starts above every fence ever handed out.
type fenceSource struct {
	store FenceStore
	block uint64

	mu   sync.Mutex
	last uint64 // protected by mu; the last fence handed out
	hwm  uint64 // protected by mu; fences ≤ hwm are reserved on disk
}

func newFenceSource(store FenceStore, block uint64) (*fenceSource, error) {
	f := &fenceSource{store: store, block: block}
	if store == nil {
		f.hwm = ^uint64(0)
		return f, nil
	}
	hwm, err := store.GetUint64(context.Background(), fenceKey)
	if err != nil {
		return nil, fmt.Errorf("reading fence high-water mark: %w", err)
	}
	f.last, f.hwm = hwm, hwm
	return f, nil
}

// next returns a fence greater than every fence returned before, also by
// earlier processes on the same store.
func (f *fenceSource) next() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == f.hwm {
		hwm := f.hwm + f.block
		if err := f.store.PutUint64(context.Background(), fenceKey, hwm); err != nil {
			return 0, fmt.Errorf("persisting fence high-water mark: %w", err)
		}
		f.hwm = hwm
	}
	f.last++
	return f.last, nil
}
