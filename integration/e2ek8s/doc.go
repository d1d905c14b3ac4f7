// Package e2ek8s is make e2e-k8s: the chart deploy/helm/sharedcontent
// installed with helm on a Kubernetes cluster of real kubelets, on one
// machine (docs/e2e.md "Kubernetes").
//
// The test stands up etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler on the host, an in-process registry and a
// sharedcontent-lockserver (the chart's coordinator.externalURL), and
// nodes that are simulated machines: each its own PID, mount, UTS and
// network namespace, its PID 1 the minimal init of ./nodeinit (the one
// stand-in: no systemd here), its own directories bound over the host
// paths the chart uses, the shared root the same host directory in every
// node, and containerd (with CRI) and kubelet as units of that init. A
// node "reboots" when its PID 1 is killed: the PID namespace dies with
// every process of the node, and a new init boots it again.
//
// Everything here is in _test.go files and skips unless
// SHAREDCONTENT_E2E_K8S=1 and running as root.
package e2ek8s
