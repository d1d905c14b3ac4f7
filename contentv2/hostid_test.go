package contentv2

import (
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/require"
)

// TestJournalOfAnotherHost (docs/design.md §8.5): a journal keeps its
// generation and membership on the host it was made on, and on a host
// whose fingerprint cannot be read or comes from another source; opened
// on another host (a copy of the state dir) it starts a new generation and
// is no member, and keeps its entries.
func TestJournalOfAnotherHost(t *testing.T) {
	dir := t.TempDir()
	d := digest.FromString("a blob")
	open := func(host string) *journal {
		t.Helper()
		j, err := openJournal(dir, host)
		require.NoError(t, err)
		return j
	}
	j := open("dmi:host")
	gen := j.generation
	require.NoError(t, j.add(d))
	require.NoError(t, j.setMember("cluster"))
	require.NoError(t, j.close())

	for _, host := range []string{"dmi:host", "", "other-source:x"} {
		j = open(host)
		require.Equal(t, gen, j.generation, "host %q: the same host, or not comparable", host)
		require.Equal(t, "cluster", j.memberOf(), host)
		require.NoError(t, j.close())
	}

	j = open("dmi:clone")
	require.NotEqual(t, gen, j.generation, "a journal copied to another host starts a new generation")
	require.Empty(t, j.memberOf(), "and is no member")
	require.True(t, j.has(d), "its entries stay")
	clone := j.generation
	require.NoError(t, j.close())
	j = open("dmi:clone")
	require.Equal(t, clone, j.generation, "it is the clone's journal from now on")
	require.NoError(t, j.close())
}
