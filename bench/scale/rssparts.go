package scale

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// rssParts samples the two parts of a process's resident set from its
// start: RssAnon (its heap and stacks: its own memory) and RssFile (the
// pages of files it maps, for the coordinator the database's mapped
// pages, which the kernel reclaims as page cache). VmHWM is their peak
// sum; these are each part's own peak, sampled (a shorter peak between
// two samples is missed), so they need not add up to it.
type rssParts struct {
	mu         sync.Mutex
	anon, file int64 // the highest seen, bytes; protected by mu
	stop, done chan struct{}
}

// rssSampleEvery is the sampling period of rssParts.
const rssSampleEvery = 50 * time.Millisecond

// sampleRSS samples process pid's RssAnon and RssFile until end.
func sampleRSS(pid int) *rssParts {
	p := &rssParts{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(rssSampleEvery)
		defer t.Stop()
		for {
			if anon, file, err := rssOf(pid); err == nil {
				p.mu.Lock()
				p.anon, p.file = max(p.anon, anon), max(p.file, file)
				p.mu.Unlock()
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// end stops the sampling (the process ends); the peaks stay readable.
func (p *rssParts) end() {
	if p == nil {
		return
	}
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// peaks returns the highest RssAnon and RssFile seen (zero without p).
func (p *rssParts) peaks() (anon, file int64) {
	if p == nil {
		return 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.anon, p.file
}

// rssOf reads process pid's RssAnon and RssFile (bytes) from
// /proc/<pid>/status.
func rssOf(pid int) (anon, file int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	var seen int
	for _, line := range strings.Split(string(b), "\n") {
		for name, into := range map[string]*int64{"RssAnon:": &anon, "RssFile:": &file} {
			if v, ok := strings.CutPrefix(line, name); ok {
				var kb int64
				if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d", &kb); err != nil {
					return 0, 0, fmt.Errorf("/proc/%d/status: %s %q: %w", pid, name, v, err)
				}
				*into = kb << 10
				seen++
			}
		}
	}
	if seen != 2 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no RssAnon or RssFile", pid)
	}
	return anon, file, nil
}
