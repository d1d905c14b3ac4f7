package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
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

// TestHelmDaemonSetArgs: the Helm chart's DaemonSet, as rendered for every
// values file of its ci/ (deploy/check/testdata/helm, kept current by make
// helm-check), starts this daemon with arguments and environment its own
// flag set accepts, against a remote coordinator, as the node named by
// the pod's spec.nodeName.
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
				for _, e := range cs[0].Env {
					switch {
					case e.Value != nil:
						t.Setenv(e.Name, *e.Value)
					case e.Name == "SHAREDCONTENT_NODE_ID":
						t.Setenv(e.Name, "node-1") // spec.nodeName
					default:
						t.Fatalf("env %s: no value this test knows", e.Name)
					}
				}
				o, err := parse(cs[0].Args)
				require.NoError(t, err, "args %q", cs[0].Args)
				require.NotEmpty(t, o.coordinatorURL, "the chart's nodes use a remote coordinator")
				require.Empty(t, o.coordinatorListen)
				require.Equal(t, "node-1", o.nodeID)
			}
			require.Equal(t, 1, found, "one DaemonSet")
		})
	}
}
