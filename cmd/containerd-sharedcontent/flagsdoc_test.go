package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/docflags"
)

// TestFlagsDocumented: every flag of containerd-sharedcontent is a row of
// its table in docs/operations.md "Flags and environment", or, one of the
// embedded coordinator's, of the coordinator's table.
func TestFlagsDocumented(t *testing.T) {
	const page = "../../docs/operations.md"
	daemon := docflags.Table(t, page, "`containerd-sharedcontent`:")
	coordinator := docflags.Table(t, page, "`sharedcontent-lockserver` (and the embedded coordinator):")
	require.Empty(t, docflags.Undocumented(newFlagSet(&options{}), daemon, coordinator), "flags missing from docs/operations.md's tables")
}
