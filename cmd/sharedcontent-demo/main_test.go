package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemo runs the demo small, with its own checks: every node reads the
// image back, and after the first node's garbage collection every other
// node still reads every blob and every file stays (collectOnOne).
func TestDemo(t *testing.T) {
	require.NoError(t, run(demoFlags{nodes: 3, layers: 2, layerMiB: 1}))
}
