package scale

import (
	"slices"
	"sync"
	"time"
)

// samples collects durations from many goroutines.
type samples struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

// quantiles returns the nearest-rank quantiles qs of the samples (0 with
// none) and their count.
func (s *samples) quantiles(qs ...float64) ([]time.Duration, int) {
	s.mu.Lock()
	d := slices.Clone(s.d)
	s.mu.Unlock()
	slices.Sort(d)
	out := make([]time.Duration, len(qs))
	if len(d) == 0 {
		return out, 0
	}
	for i, q := range qs {
		out[i] = d[int(q*float64(len(d)-1)+0.5)]
	}
	return out, len(d)
}
