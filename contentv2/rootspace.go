package contentv2

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// rootSpaceTimeout bounds the statfs of a scrape: a shared filesystem
// that does not answer within it (hung) leaves the root's space series out
// of that scrape rather than hang it.
const rootSpaceTimeout = time.Second

// space is a filesystem's size and the bytes still available on it.
type space struct {
	size, free uint64
}

// rootSpace exports the shared root's size and free space
// (sharedcontent_root_size_bytes, sharedcontent_root_free_bytes), read
// with statfs at each scrape. At most one statfs is in flight: a scrape
// while one hangs waits for it up to rootSpaceTimeout and starts none, so
// a hung filesystem neither hangs the scrape nor piles up goroutines. The
// series are absent from a scrape whose statfs failed or did not answer
// in time.
type rootSpace struct {
	root       string
	stat       func(path string) (space, error) // statRoot; tests replace it
	size, free *prometheus.Desc

	mu      sync.Mutex
	pending chan struct{} // protected by mu; closed when the statfs in flight ends
	last    space         // protected by mu; the last statfs's answer
	lastErr error         // protected by mu
}

func newRootSpace(root string) *rootSpace {
	return &rootSpace{
		root: root,
		stat: statRoot,
		size: prometheus.NewDesc("sharedcontent_root_size_bytes",
			"Size of the filesystem holding the shared root (statfs at each scrape; absent when it did not answer within 1 s).", nil, nil),
		free: prometheus.NewDesc("sharedcontent_root_free_bytes",
			"Bytes available on the filesystem holding the shared root (statfs f_bavail; absent when it did not answer within 1 s). Pulls fail when it reaches 0.", nil, nil),
	}
}

func (r *rootSpace) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.size
	ch <- r.free
}

func (r *rootSpace) Collect(ch chan<- prometheus.Metric) {
	sp, ok := r.read(rootSpaceTimeout)
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(r.size, prometheus.GaugeValue, float64(sp.size))
	ch <- prometheus.MustNewConstMetric(r.free, prometheus.GaugeValue, float64(sp.free))
}

// read returns the root's space, starting a statfs unless one is in
// flight, and waiting for it at most timeout.
func (r *rootSpace) read(timeout time.Duration) (space, bool) {
	r.mu.Lock()
	done := r.pending
	if done == nil {
		done = make(chan struct{})
		r.pending = done
		go func() {
			sp, err := r.stat(r.root)
			r.mu.Lock()
			r.last, r.lastErr, r.pending = sp, err, nil
			r.mu.Unlock()
			close(done)
		}()
	}
	r.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		return space{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.lastErr == nil
}
