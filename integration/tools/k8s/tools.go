//go:build tools

// Package tools pins the Kubernetes binaries of make e2e-k8s: kubelet,
// kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy and
// kubectl, built by integration/tools/k8s.sh from k8s.io/kubernetes.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
