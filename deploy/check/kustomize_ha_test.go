package check

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"sigs.k8s.io/yaml"
)

// haDir is the HA variant of deploy/kubernetes: the base plus the
// coordinator's replicas on etcd (docs/kubernetes.md "HA on etcd").
const haDir = "../kubernetes/ha"

// haKustomization is the part of the overlay's Kustomization it uses.
type haKustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Patches    []struct {
		Path string `json:"path"`
	} `json:"patches"`
}

// loadHA builds the HA variant as kustomize does: the base's objects,
// the overlay's own, and its strategic merge patch applied to the base's
// StatefulSet (the patch semantics kustomize follows: null clears a
// field, $patch: delete drops a list entry by its merge key).
func loadHA(t *testing.T) (*manifests, haKustomization) {
	t.Helper()
	m, _ := load(t)
	b, err := os.ReadFile(filepath.Join(haDir, "kustomization.yaml"))
	require.NoError(t, err)
	var k haKustomization
	require.NoError(t, decodeStrict(b, &k))
	require.Equal(t, "Kustomization", k.Kind)
	require.Equal(t, "sharedcontent", k.Namespace, "the base's namespace")
	require.Contains(t, k.Resources, "../", "the base")
	require.NotEmpty(t, k.Patches)

	files, err := filepath.Glob(filepath.Join(haDir, "*.yaml"))
	require.NoError(t, err)
	listed := map[string]bool{"kustomization.yaml": true}
	for _, p := range k.Patches {
		listed[p.Path] = true
	}
	for _, r := range k.Resources {
		if r == "../" {
			continue
		}
		listed[r] = true
		b, err := os.ReadFile(filepath.Join(haDir, r))
		require.NoError(t, err)
		for i, doc := range documents(b) {
			require.NoError(t, m.add(doc), "%s, document %d", r, i+1)
		}
	}
	for _, f := range files {
		require.True(t, listed[filepath.Base(f)], "%s is neither a resource nor the patch", f)
	}

	for _, p := range k.Patches {
		applyPatch(t, m, filepath.Join(haDir, p.Path))
	}
	return m, k
}

// applyPatch applies the strategic merge patch in file to the base's
// object it names (the StatefulSet or the DaemonSet), as kustomize does.
func applyPatch(t *testing.T, m *manifests, file string) {
	t.Helper()
	patch, err := os.ReadFile(file)
	require.NoError(t, err)
	var target struct {
		Kind     string
		Metadata struct{ Name string }
	}
	require.NoError(t, yaml.Unmarshal(patch, &target))
	patchJSON, err := yaml.YAMLToJSONStrict(patch)
	require.NoError(t, err)
	merge := func(obj, schema any, out any) {
		base, err := json.Marshal(obj)
		require.NoError(t, err)
		merged, err := strategicpatch.StrategicMergePatch(base, patchJSON, schema)
		require.NoError(t, err, file)
		require.NoError(t, decodeStrict(merged, out), "%s: the patched object", file)
	}
	switch target.Kind {
	case "StatefulSet":
		require.Len(t, m.statefulSets, 1)
		require.Equal(t, m.statefulSets[0].Name, target.Metadata.Name, "%s names the base's StatefulSet", file)
		st := &appsv1.StatefulSet{}
		merge(m.statefulSets[0], appsv1.StatefulSet{}, st)
		m.statefulSets[0] = st
	case "DaemonSet":
		require.Len(t, m.daemonSets, 1)
		require.Equal(t, m.daemonSets[0].Name, target.Metadata.Name, "%s names the base's DaemonSet", file)
		ds := &appsv1.DaemonSet{}
		merge(m.daemonSets[0], appsv1.DaemonSet{}, ds)
		m.daemonSets[0] = ds
	default:
		t.Fatalf("%s patches a %s: not known to this test", file, target.Kind)
	}
}

// TestKustomizeHA: the HA variant runs 3 replicas of the coordinator on
// etcd with no PVC, its etcd settings from the ConfigMap, each replica
// advertising its own name in the headless Service; the base's Service
// (the nodes' --coordinator) routes to the ready replica, the leader; one
// replica per node, one disrupted at a time. Flags and variables are the
// coordinator's own.
func TestKustomizeHA(t *testing.T) {
	m, _ := loadHA(t)
	st := m.statefulSets[0]
	spec := st.Spec.Template.Spec
	c := onlyContainer(t, spec)
	f := flagValues(t, c)
	require.Equal(t, int32(3), *st.Spec.Replicas)
	require.Equal(t, appsv1.ParallelPodManagement, st.Spec.PodManagementPolicy)
	for _, vm := range c.VolumeMounts {
		v, _ := mountOf(t, spec, c, vm.MountPath)
		require.NotNil(t, v, "mount %s has a volume", vm.MountPath)
	}
	requireTokenFile(t, spec, c, f["auth-token-file"])

	// Every flag and every SHAREDCONTENT_ variable names a flag of the
	// coordinator; etcd's settings come from the overlay's ConfigMap.
	flags := flagNames(t, "sharedcontent-lockserver")
	for name := range f {
		require.True(t, flags[name], "--%s is no flag of sharedcontent-lockserver", name)
	}
	set := map[string]bool{}
	for _, e := range c.Env {
		flag, ok := strings.CutPrefix(e.Name, "SHAREDCONTENT_")
		if !ok {
			continue
		}
		flag = strings.ReplaceAll(strings.ToLower(flag), "_", "-")
		require.True(t, flags[flag], "%s is no flag of sharedcontent-lockserver (--%s)", e.Name, flag)
		set[flag] = true
		if ref := e.ValueFrom; ref != nil {
			require.NotNil(t, ref.ConfigMapKeyRef, e.Name)
			var cm *corev1.ConfigMap
			for _, x := range m.configMaps {
				if x.Name == ref.ConfigMapKeyRef.Name {
					cm = x
				}
			}
			require.NotNil(t, cm, "%s: ConfigMap %s", e.Name, ref.ConfigMapKeyRef.Name)
			require.NotEmpty(t, cm.Data[ref.ConfigMapKeyRef.Key], "%s: key %s", e.Name, ref.ConfigMapKeyRef.Key)
			if flag == "etcd-endpoints" {
				requireEtcdURLs(t, cm.Data[ref.ConfigMapKeyRef.Key])
			}
		}
	}
	require.True(t, set["etcd-endpoints"], "SHAREDCONTENT_ETCD_ENDPOINTS is set")

	var nodes *corev1.Service
	for _, s := range m.services {
		if s.Name == "sharedcontent-lockserver" {
			nodes = s
		}
	}
	require.NotNil(t, nodes, "the base's Service")
	peers := checkReplicas(t, m, st, c, f, nodes)
	u, err := url.Parse(f["advertise-url"])
	require.NoError(t, err)
	require.Equal(t, "$(POD_NAME)."+peers.Name, u.Hostname(), "short, as the base's Service")

	// The nodes list every replica as it advertises itself (they follow
	// a not_leader hint only to a URL of their list); their other flags
	// are the base's.
	base, _ := load(t)
	bf := flagValues(t, onlyContainer(t, base.daemonSets[0].Spec.Template.Spec))
	nf := flagValues(t, onlyContainer(t, m.daemonSets[0].Spec.Template.Spec))
	require.Equal(t, replicaURLs(st, f["advertise-url"]), nf["coordinator"], "--coordinator lists every replica")
	delete(bf, "coordinator")
	delete(nf, "coordinator")
	require.Equal(t, bf, nf, "daemonset-ha.yaml keeps the base's other arguments")

	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, "ready: the leader")
	require.Equal(t, int32(1), c.ReadinessProbe.PeriodSeconds)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
}

// TestKustomizeHAMatchesHelm: the HA variant's replicas take the flags
// the chart's HA rendering gives them (the chart's prefix and TTL are
// flags, the overlay's are variables; the URLs name each one's objects).
func TestKustomizeHAMatchesHelm(t *testing.T) {
	k, _ := loadHA(t)
	h := loadRendered(t, renderedFiles(t)["ha"])
	kc := onlyContainer(t, k.statefulSets[0].Spec.Template.Spec)
	kf := flagValues(t, kc)
	for _, e := range kc.Env {
		if flag, ok := strings.CutPrefix(e.Name, "SHAREDCONTENT_"); ok {
			kf[strings.ReplaceAll(strings.ToLower(flag), "_", "-")] = "set"
		}
	}
	hf := flagValues(t, onlyContainer(t, h.statefulSets[0].Spec.Template.Spec))
	for _, f := range []string{"etcd-endpoints", "etcd-prefix", "etcd-session-ttl", "advertise-url", "listen", "auth-token-file"} {
		require.Contains(t, kf, f)
		require.Contains(t, hf, f)
	}
	require.Equal(t, *h.statefulSets[0].Spec.Replicas, *k.statefulSets[0].Spec.Replicas)
}

// TestKustomizeHAEtcdTLS: the etcd-tls component, applied to the HA
// variant, sets the coordinator's etcd TLS files, each a key of the
// Secret it mounts read only with a mode the coordinator accepts.
func TestKustomizeHAEtcdTLS(t *testing.T) {
	dir := filepath.Join(haDir, "etcd-tls")
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	var k haKustomization
	require.NoError(t, decodeStrict(b, &k))
	require.Equal(t, "Component", k.Kind)
	require.Len(t, k.Patches, 1)
	m, _ := loadHA(t)
	applyPatch(t, m, filepath.Join(dir, k.Patches[0].Path))
	spec := m.statefulSets[0].Spec.Template.Spec
	c := onlyContainer(t, spec)
	flags := flagNames(t, "sharedcontent-lockserver")
	files := map[string]string{}
	for _, e := range c.Env {
		if flag, ok := strings.CutPrefix(e.Name, "SHAREDCONTENT_ETCD_"); ok && e.ValueFrom == nil {
			flag = "etcd-" + strings.ReplaceAll(strings.ToLower(flag), "_", "-")
			require.True(t, flags[flag], "%s is no flag of sharedcontent-lockserver", e.Name)
			files[flag] = e.Value
		}
	}
	for flag, key := range map[string]string{"etcd-cacert": "ca.crt", "etcd-cert": "tls.crt", "etcd-key": "tls.key"} {
		require.Contains(t, files, flag)
		requireSecretFile(t, spec, c, files[flag], "sharedcontent-etcd-tls", key)
	}
}
