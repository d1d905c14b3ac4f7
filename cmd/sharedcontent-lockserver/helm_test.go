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

// statefulSet is the part of a rendered StatefulSet this test reads.
type statefulSet struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Command []string `yaml:"command"`
					Args    []string `yaml:"args"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// TestHelmCoordinatorArgs: the Helm chart's coordinator, as rendered for
// every values file of its ci/ (deploy/check/testdata/helm, kept current
// by make helm-check), is started with arguments its own flag set
// accepts, listening beyond loopback (its Service must reach it) with an
// identity, so that it does not serve the network unauthenticated. Some
// values file renders replicas on etcd, whose flags validate too
// (--advertise-url with the pod's name, which kubelet expands).
func TestHelmCoordinatorArgs(t *testing.T) {
	files, err := filepath.Glob("../../deploy/check/testdata/helm/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var rendered, replicas int
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			b, err := os.ReadFile(file)
			require.NoError(t, err)
			dec := yaml.NewDecoder(bytes.NewReader(b))
			for {
				var ss statefulSet
				err := dec.Decode(&ss)
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				if ss.Kind != "StatefulSet" {
					continue
				}
				rendered++
				cs := ss.Spec.Template.Spec.Containers
				require.Len(t, cs, 1, ss.Metadata.Name)
				require.Equal(t, []string{"/usr/local/bin/sharedcontent-lockserver"}, cs[0].Command)
				o, err := parse(cs[0].Args)
				require.NoError(t, err, "args %q", cs[0].Args)
				require.Equal(t, "0.0.0.0:8642", o.listen, "reachable through the Service")
				require.NotEqual(t, "none", o.cfg.Identity(), "an identity on a reachable address")
				if o.etcd.Enabled() {
					replicas++
					require.Contains(t, o.etcd.AdvertiseURL, "$(POD_NAME).", "each replica advertises its own name")
				}
			}
		})
	}
	require.Positive(t, rendered, "some values file renders the coordinator")
	require.Positive(t, replicas, "some values file renders replicas on etcd")
}
