package scale

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// stuckFetches records why the fetches that never finished failed (the
// nodes left unfinished when a rollout's deadline ends): the first error
// of each and the last, by kind, so that a rollout that does not finish
// says what its stuck nodes met.
type stuckFetches struct {
	mu          sync.Mutex
	first, last map[string]int
}

// note records one unfinished fetch's first and last errors.
func (s *stuckFetches) note(first, last error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == nil {
		s.first, s.last = map[string]int{}, map[string]int{}
	}
	s.first[errKind(first)]++
	s.last[errKind(last)]++
}

// top lists the n commonest first and last errors, "count× kind".
func (s *stuckFetches) top(n int) (first, last []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return topKinds(s.first, n), topKinds(s.last, n)
}

func topKinds(m map[string]int, n int) []string {
	kinds := make([]string, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(m[b]-m[a], strings.Compare(a, b)) })
	out := []string{}
	for _, k := range kinds[:min(n, len(kinds))] {
		out = append(out, fmt.Sprintf("%d× %s", m[k], k))
	}
	return out
}

var (
	digestRE   = regexp.MustCompile(`sha256:[0-9a-f]{64}`)
	nodeRE     = regexp.MustCompile(`scale-\d{5}`)
	durationRE = regexp.MustCompile(`\d+(\.\d+)?(ns|µs|ms|s|m|h)\b`)
)

// errKind is err's message without what differs between nodes, blobs and
// times.
func errKind(err error) string {
	if err == nil {
		return "none"
	}
	s := digestRE.ReplaceAllString(err.Error(), "sha256:…")
	s = nodeRE.ReplaceAllString(s, "NODE")
	return durationRE.ReplaceAllString(s, "D")
}
