package lockserver

import (
	"context"
	"fmt"
	"sync"

	"github.com/sharedcontent/sharedcontent/refcount"
)

// fenceSource hands out strictly increasing fences. It reserves them in
// blocks: before handing out fences up to hwm it persists hwm, so after a
// restart it starts above every fence ever handed out.
type fenceSource struct {
	put   func(hwm uint64) error // persists the high-water mark
	block uint64

	mu   sync.Mutex
	last uint64 // protected by mu; the last fence handed out
	hwm  uint64 // protected by mu; fences ≤ hwm are reserved on disk
}

// newFenceSource reads the persisted high-water mark and returns the
// locks part's fence source, which persists the next ones in st.
func newFenceSource(ctx context.Context, st *store, block uint64) (*fenceSource, error) {
	hwm, err := st.state.LeaseFenceMark(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading fence high-water mark: %w", err)
	}
	put := func(hwm uint64) error {
		return st.refs.Commit(context.Background(), new(refcount.Batch).PutLeaseFenceMark(hwm))
	}
	return &fenceSource{put: put, block: block, last: hwm, hwm: hwm}, nil
}

// next returns a fence greater than every fence returned before, also by
// earlier processes on the same store.
func (f *fenceSource) next() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == f.hwm {
		hwm := f.hwm + f.block
		if err := f.put(hwm); err != nil {
			return 0, fmt.Errorf("persisting fence high-water mark: %w", err)
		}
		f.hwm = hwm
	}
	f.last++
	return f.last, nil
}
