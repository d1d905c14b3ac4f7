package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/version"
)

// TestVersion: --version prints the build and asks no coordinator (none
// listens at the default address in a test), with or without a command.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"--version", "status"}} {
		out, notes, err := ctlErr(args...)
		require.NoError(t, err, "%q", args)
		require.Equal(t, "sharedcontentctl "+version.Get().String()+"\n", out)
		require.Empty(t, notes)
	}
}
