//go:build tools

// Package crictl pins the crictl binary the end-to-end tests drive
// containerd's CRI with. Build it with ../build.sh; this file only exists
// so that go.mod/go.sum record every dependency of cmd/crictl. A module of
// its own: cri-tools' Kubernetes dependencies must not move the versions
// containerd is built with in the parent module.
package crictl

import _ "sigs.k8s.io/cri-tools/cmd/crictl"
