//go:build tools

// Package tools pins helm, which `make helm-check` builds into .cache/bin.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
