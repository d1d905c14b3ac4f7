package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// daemonSet is the part of a rendered DaemonSet this test reads.
type daemonSet struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Name    string   `yaml:"name"`
					Command []string `yaml:"command"`
					Args    []string `yaml:"args"`
					Env     []struct {
						Name      string  `yaml:"name"`
						Value     *string `yaml:"value"`
						ValueFrom any     `yaml:"valueFrom"`
					} `yaml:"env"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// kubeVar is a $(VAR) reference that kubelet expands in a container's args.
var kubeVar = regexp.MustCompile(`\$\([A-Za-z_][A-Za-z0-9_]*\)`)

// TestHelmDaemonSetArgs: the Helm chart's DaemonSet, as rendered for every
// values file of its ci/ (deploy/check/testdata/helm, kept current by make
// helm-check), starts this daemon (pod mode), or installs it with its
// flags (host mode: `install` with its own flags, then the daemon's after
// --, $(VAR) expanded from the container's environment as kubelet does),
// with arguments and environment its own flag sets accept, against a
// remote coordinator, as the node named by the pod's spec.nodeName.
func TestHelmDaemonSetArgs(t *testing.T) {
	files, err := filepath.Glob("../../deploy/check/testdata/helm/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			var found int
			dec := yaml.NewDecoder(bytes.NewReader(b))
			for {
				var ds daemonSet
				err := dec.Decode(&ds)
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				if ds.Kind != "DaemonSet" {
					continue
				}
				found++
				cs := ds.Spec.Template.Spec.Containers
				require.Len(t, cs, 1)
				require.Equal(t, []string{"/usr/local/bin/containerd-sharedcontent"}, cs[0].Command)
				vars := map[string]string{}
				for _, e := range cs[0].Env {
					switch {
					case e.Value != nil:
						vars[e.Name] = *e.Value
					case e.Name == "SHAREDCONTENT_NODE_ID" || e.Name == "NODE_NAME":
						vars[e.Name] = "node-1" // spec.nodeName
					default:
						t.Fatalf("env %s: no value this test knows", e.Name)
					}
				}
				args := cs[0].Args
				for i, a := range args {
					args[i] = kubeVar.ReplaceAllStringFunc(a, func(v string) string { return vars[v[2:len(v)-1]] })
				}
				if len(args) > 0 && args[0] == "install" {
					t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
					t.Setenv("KUBERNETES_SERVICE_PORT", "443")
					io, err := parseInstall(append([]string{"--namespace=sharedcontent"}, args[1:]...))
					require.NoError(t, err, "args %q", args)
					require.Equal(t, "/host", io.cfg.HostRoot)
					require.Contains(t, []string{"https://10.96.0.1:443", "https://10.0.0.1:6443"}, io.ds.APIServer, "the kubernetes Service, or node.apiServer")
					require.Equal(t, "http://127.0.0.1:9642/readyz", io.cfg.ReadyURL)
					args = io.daemonArgs
				} else {
					for k, v := range vars {
						t.Setenv(k, v)
					}
				}
				o, err := parse(args)
				require.NoError(t, err, "args %q", args)
				require.NotEmpty(t, o.coordinatorURL, "the chart's nodes use a remote coordinator")
				require.Empty(t, o.coordinatorListen)
				require.Equal(t, "node-1", o.nodeID)
			}
			require.Equal(t, 1, found, "one DaemonSet")
		})
	}
}
