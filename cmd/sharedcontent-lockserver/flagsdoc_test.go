package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/docflags"
)

// TestFlagsDocumented: every flag of sharedcontent-lockserver is a row of
// its table in docs/operations.md "Flags and environment".
func TestFlagsDocumented(t *testing.T) {
	table := docflags.Table(t, "../../docs/operations.md", "`sharedcontent-lockserver` (and the embedded coordinator):")
	require.Empty(t, docflags.Undocumented(flags(&options{}), table), "flags missing from docs/operations.md's sharedcontent-lockserver table")
}
