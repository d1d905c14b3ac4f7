// Package check holds the tests of deploy/: the Kubernetes manifests
// decoded strictly into the k8s.io/api types and cross-checked, the
// systemd units and their environment files against the daemons' flags,
// and the Grafana dashboard against the metrics the code defines. It is a
// module of its own so that the main module does not depend on
// k8s.io/api; `make test` runs it.
package check
