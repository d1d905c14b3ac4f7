package contentv2_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver"
)

// TestFailOpenDelaysAgree: the coordinator checks its lease TTL against
// the fail-open delay the nodes count with (docs/design.md §8.8).
func TestFailOpenDelaysAgree(t *testing.T) {
	for _, ttl := range []time.Duration{10 * time.Millisecond, 400 * time.Millisecond, 3 * time.Second, 15 * time.Second, time.Hour} {
		require.Equal(t, contentv2.FailOpenDelay(ttl), lockserver.FailOpenDelay(ttl), "session TTL %s", ttl)
	}
}
