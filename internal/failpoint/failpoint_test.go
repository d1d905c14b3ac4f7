package failpoint

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	got, err := parse(" store/write/after-rename=exit; coord/sync/after-replace=sleep(250);store/sync/snapshot=panic;store/ref/after-coord=off ")
	require.NoError(t, err)
	require.Equal(t, map[string]action{
		StoreWriteAfterRename: {kind: actExit},
		CoordSyncAfterReplace: {kind: actSleep, sleep: 250 * time.Millisecond},
		StoreSyncSnapshot:     {kind: actPanic},
	}, got)

	for _, bad := range []string{"store/write/after-rename", "no/such/point=exit", "store/write/after-rename=kill",
		"store/write/after-rename=sleep(x)", "store/write/after-rename=sleep(-1)"} {
		_, err := parse(bad)
		require.Error(t, err, bad)
	}
	empty, err := parse("")
	require.NoError(t, err)
	require.Empty(t, empty)
}

func TestNamesUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range Names {
		require.False(t, seen[n], "duplicate failpoint %s", n)
		seen[n] = true
	}
}

// BenchmarkInject measures a point on the hot path; without the build tag
// it is an empty inlined call (0 ns/op).
func BenchmarkInject(b *testing.B) {
	for b.Loop() {
		Inject(StoreWriteAfterRename)
	}
}
