//go:build tools

// Package tools pins the containerd binaries used by the end-to-end tests.
// Build them with ./build.sh; this file only exists so that go.mod/go.sum
// record every dependency of cmd/containerd and cmd/ctr.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
