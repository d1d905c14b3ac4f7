package check

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	manifestDir = "../kubernetes"
	// tokenSecret is the Secret docs/kubernetes.md tells operators to create.
	tokenSecret = "sharedcontent-token"
)

// manifests are the objects of deploy/kubernetes, by kind.
type manifests struct {
	daemonSets     []*appsv1.DaemonSet
	statefulSets   []*appsv1.StatefulSet
	services       []*corev1.Service
	configMaps     []*corev1.ConfigMap
	namespaces     []*corev1.Namespace
	serviceMonitor []*monitoringv1.ServiceMonitor
	pdbs           []*policyv1.PodDisruptionBudget
	serviceAccts   []*corev1.ServiceAccount
	roles          []*rbacv1.Role
	roleBindings   []*rbacv1.RoleBinding
}

// kustomization is the part of kustomize's Kustomization the manifests
// use; decoding it strictly catches a misspelt key.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// decodeStrict decodes one YAML document into obj: duplicate keys, unknown
// fields and fields spelt in another case are errors.
func decodeStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strictErrs, err := json.UnmarshalStrict(j, obj, json.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		return fmt.Errorf("%v", strictErrs)
	}
	return nil
}

// documents splits a YAML stream on its "---" lines, dropping documents
// that hold only comments.
func documents(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		var content bool
		for _, line := range strings.Split(d, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				content = true
			}
		}
		if content {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func (m *manifests) add(doc []byte) error {
	var u unstructured.Unstructured
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	if err := u.UnmarshalJSON(j); err != nil {
		return err
	}
	gvk := u.GroupVersionKind()
	switch gvk.GroupVersion().String() + " " + gvk.Kind {
	case "apps/v1 DaemonSet":
		return decodeInto(doc, &m.daemonSets)
	case "apps/v1 StatefulSet":
		return decodeInto(doc, &m.statefulSets)
	case "v1 Service":
		return decodeInto(doc, &m.services)
	case "v1 ConfigMap":
		return decodeInto(doc, &m.configMaps)
	case "v1 Namespace":
		return decodeInto(doc, &m.namespaces)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return decodeInto(doc, &m.serviceMonitor)
	case "policy/v1 PodDisruptionBudget":
		return decodeInto(doc, &m.pdbs)
	case "v1 ServiceAccount":
		return decodeInto(doc, &m.serviceAccts)
	case "rbac.authorization.k8s.io/v1 Role":
		return decodeInto(doc, &m.roles)
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		return decodeInto(doc, &m.roleBindings)
	}
	return fmt.Errorf("kind %s: not known to this test; add it", gvk)
}

func decodeInto[T any](doc []byte, list *[]*T) error {
	obj := new(T)
	if err := decodeStrict(doc, obj); err != nil {
		return err
	}
	*list = append(*list, obj)
	return nil
}

// load decodes every manifest, failing the test on the first that does not
// decode strictly, and the kustomization.
func load(t *testing.T) (*manifests, kustomization) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	m := &manifests{}
	var k kustomization
	var listed []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if filepath.Base(f) == "kustomization.yaml" {
			require.NoError(t, decodeStrict(b, &k), f)
			continue
		}
		listed = append(listed, filepath.Base(f))
		docs := documents(b)
		require.NotEmpty(t, docs, "%s holds no object", f)
		for i, doc := range docs {
			require.NoError(t, m.add(doc), "%s, document %d", f, i+1)
		}
	}
	require.Equal(t, "Kustomization", k.Kind)
	sort.Strings(listed)
	resources := slices.Clone(k.Resources)
	sort.Strings(resources)
	require.Equal(t, listed, resources, "kustomization.yaml lists every manifest, and only those")
	return m, k
}

func TestManifestsDecodeStrictly(t *testing.T) {
	m, _ := load(t)
	require.Len(t, m.daemonSets, 1)
	require.Len(t, m.statefulSets, 1)
	require.Len(t, m.configMaps, 1)
	require.Len(t, m.services, 2)
	require.Len(t, m.serviceMonitor, 2)
}

// TestDecodeStrictRejectsTypos makes sure the check above can fail.
func TestDecodeStrictRejectsTypos(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":  "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {prots: []}\n",
		"case":           "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ClusterIP: None}\n",
		"duplicate key":  "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIP: None, clusterIP: None}\n",
		"bad base64":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\nbinaryData: {b: '%'}\n",
		"bad quantity":   "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec: {template: {spec: {containers: [{name: a, resources: {requests: {cpu: lots}}}]}}}\n",
		"unknown kind":   "apiVersion: v1\nkind: Servcie\nmetadata: {name: x}\n",
		"monitor typo":   "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec: {selector: {}, endpoints: [{prot: http}]}\n",
		"wrong version":  "apiVersion: apps/v1beta1\nkind: DaemonSet\nmetadata: {name: x}\n",
		"volume typo":    "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec: {template: {spec: {volumes: [{name: a, hostpath: {path: /x}}]}}}\n",
		"default mode s": "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec: {template: {spec: {volumes: [{name: a, secret: {defaultMode: '0400'}}]}}}\n",
	} {
		t.Run(name, func(t *testing.T) {
			require.Error(t, (&manifests{}).add([]byte(doc)))
		})
	}
}

// flagValues returns a container's --name=value arguments.
func flagValues(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	v := map[string]string{}
	for _, a := range c.Args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		require.True(t, ok && strings.HasPrefix(a, "--"), "%s: write flags as --name=value: %q", c.Name, a)
		v[name] = value
	}
	return v
}

// mountOf returns the mount that holds path in the container, and its
// volume (nil when it is none of the pod's volumes: a claim template's).
func mountOf(t *testing.T, spec corev1.PodSpec, c corev1.Container, p string) (*corev1.Volume, corev1.VolumeMount) {
	t.Helper()
	var best corev1.VolumeMount
	for _, vm := range c.VolumeMounts {
		if (p == vm.MountPath || strings.HasPrefix(p, vm.MountPath+"/")) && len(vm.MountPath) > len(best.MountPath) {
			best = vm
		}
	}
	require.NotEmpty(t, best.Name, "%s: no volume mounted at %s", c.Name, p)
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == best.Name {
			return &spec.Volumes[i], best
		}
	}
	return nil, best
}

// requireHostPath checks that p is in a hostPath volume mounted at the
// host's own path: containerd on the host and the daemon name the same
// files.
func requireHostPath(t *testing.T, spec corev1.PodSpec, c corev1.Container, p string) {
	t.Helper()
	v, vm := mountOf(t, spec, c, p)
	require.NotNil(t, v, "%s: volume %s is not defined", p, vm.Name)
	require.NotNil(t, v.HostPath, "%s is in volume %s, not a hostPath", p, v.Name)
	require.Equal(t, vm.MountPath, v.HostPath.Path, "hostPath %s must be mounted at the same path", v.Name)
}

// requireTokenFile checks that p is the key of the token Secret, mounted
// with a mode that the daemons accept (not readable by others).
func requireTokenFile(t *testing.T, spec corev1.PodSpec, c corev1.Container, p string) {
	t.Helper()
	v, vm := mountOf(t, spec, c, p)
	require.NotNil(t, v, "%s: volume %s is not defined", p, vm.Name)
	require.NotNil(t, v.Secret, "%s is in volume %s, not a Secret", p, v.Name)
	require.Equal(t, tokenSecret, v.Secret.SecretName)
	require.Equal(t, "token", path.Base(p), "the Secret's key is token")
	require.Equal(t, vm.MountPath, path.Dir(p))
	require.NotNil(t, v.Secret.DefaultMode, "the default 0644 is refused: set defaultMode")
	require.Zero(t, *v.Secret.DefaultMode&0o007, "token files readable by others are refused: defaultMode %#o", *v.Secret.DefaultMode)
	require.True(t, vm.ReadOnly)
}

func onlyContainer(t *testing.T, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	require.Len(t, spec.Containers, 1)
	return spec.Containers[0]
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func port(t *testing.T, c corev1.Container, name string) corev1.ContainerPort {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("%s: no port named %q", c.Name, name)
	return corev1.ContainerPort{}
}

func listenPort(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	return p
}

func serviceSelecting(t *testing.T, m *manifests, podLabels map[string]string) *corev1.Service {
	t.Helper()
	for _, s := range m.services {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(podLabels)) {
			return s
		}
	}
	t.Fatalf("no Service selects pods labelled %v", podLabels)
	return nil
}

// requireServicePort checks that the Service's port name targets the
// container's port of that name.
func requireServicePort(t *testing.T, s *corev1.Service, c corev1.Container, name string) corev1.ServicePort {
	t.Helper()
	cp := port(t, c, name)
	for _, sp := range s.Spec.Ports {
		if sp.Name == name {
			require.Equal(t, intstr.FromString(name), sp.TargetPort, "Service %s port %s", s.Name, name)
			require.Equal(t, cp.ContainerPort, sp.Port, "Service %s port %s: same number as the container's", s.Name, name)
			return sp
		}
	}
	t.Fatalf("Service %s has no port %q", s.Name, name)
	return corev1.ServicePort{}
}

// TestLockServer: the StatefulSet serves on 0.0.0.0:8642 with a PVC for its
// database, its probes are /readyz and /healthz, its Service exposes the
// port, and its token is the Secret, mounted 0400.
func TestLockServer(t *testing.T) {
	m, k := load(t)
	ss := m.statefulSets[0]
	require.Equal(t, int32(1), *ss.Spec.Replicas, "one coordinator per cluster")
	spec := ss.Spec.Template.Spec
	c := onlyContainer(t, spec)
	require.Equal(t, k.Images[0].Name, c.Image, "kustomization.yaml names the image")
	f := flagValues(t, c)
	require.Equal(t, "0.0.0.0:8642", f["listen"])
	hp := port(t, c, "http")
	require.Equal(t, listenPort(t, f["listen"]), fmt.Sprint(hp.ContainerPort))
	for probe, want := range map[*corev1.Probe]string{c.ReadinessProbe: "/readyz", c.LivenessProbe: "/healthz"} {
		require.NotNil(t, probe)
		require.Equal(t, want, probe.HTTPGet.Path)
		require.Equal(t, intstr.FromString("http"), probe.HTTPGet.Port)
	}
	v, vm := mountOf(t, spec, c, f["data-dir"])
	require.Nil(t, v, "--data-dir is not on a pod volume (emptyDir loses the database)")
	require.True(t, slices.ContainsFunc(ss.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == vm.Name }),
		"--data-dir %s is on the PVC", f["data-dir"])
	requireTokenFile(t, spec, c, f["auth-token-file"])

	svc := serviceSelecting(t, m, ss.Spec.Template.Labels)
	require.Equal(t, ss.Spec.ServiceName, svc.Name)
	requireServicePort(t, svc, c, "http")
}

// TestDaemonSet: the plugin daemon runs on every node, privileged, as
// system-node-critical; its node ID is the node's name; its socket, root,
// state and containerd's directories are the host's own paths; it reaches
// the coordinator through its Service with the Secret's token.
func TestDaemonSet(t *testing.T) {
	m, k := load(t)
	ds := m.daemonSets[0]
	spec := ds.Spec.Template.Spec
	c := onlyContainer(t, spec)
	require.Equal(t, k.Images[0].Name, c.Image)
	require.Equal(t, "system-node-critical", spec.PriorityClassName)
	require.Contains(t, spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists}, "tolerates every taint")
	require.NotNil(t, c.SecurityContext)
	require.True(t, *c.SecurityContext.Privileged, "the diff service mounts snapshots")

	id := env(c, "SHAREDCONTENT_NODE_ID")
	require.NotNil(t, id)
	require.Equal(t, "spec.nodeName", id.ValueFrom.FieldRef.FieldPath)

	f := flagValues(t, c)
	for _, p := range []string{f["root"], f["address"], f["state-dir"], "/var/lib/containerd"} {
		require.NotEmpty(t, p)
		requireHostPath(t, spec, c, p)
	}
	requireTokenFile(t, spec, c, f["auth-token-file"])

	u, err := url.Parse(f["coordinator"])
	require.NoError(t, err)
	ss := m.statefulSets[0]
	svc := serviceSelecting(t, m, ss.Spec.Template.Labels)
	require.Equal(t, svc.Name, u.Hostname(), "--coordinator names the coordinator's Service")
	sp := requireServicePort(t, svc, onlyContainer(t, ss.Spec.Template.Spec), "http")
	require.Equal(t, fmt.Sprint(sp.Port), u.Port())

	mp := port(t, c, "metrics")
	require.Equal(t, listenPort(t, f["metrics-listen"]), fmt.Sprint(mp.ContainerPort))
	requireServicePort(t, serviceSelecting(t, m, ds.Spec.Template.Labels), c, "metrics")
}

// containerdConfig is the part of containerd's config the drop-in sets.
type containerdConfig struct {
	Version         int      `toml:"version"`
	DisabledPlugins []string `toml:"disabled_plugins"`
	ProxyPlugins    map[string]struct {
		Type    string `toml:"type"`
		Address string `toml:"address"`
	} `toml:"proxy_plugins"`
	Plugins struct {
		DiffService struct {
			Default []string `toml:"default"`
		} `toml:"io.containerd.service.v1.diff-service"`
		Transfer struct {
			UnpackConfig []struct {
				Platform    string `toml:"platform"`
				Snapshotter string `toml:"snapshotter"`
				Differ      string `toml:"differ"`
			} `toml:"unpack_config"`
		} `toml:"io.containerd.transfer.v1.local"`
	} `toml:"plugins"`
}

func decodeContainerd(t *testing.T, name string, b []byte) containerdConfig {
	t.Helper()
	var c containerdConfig
	d := toml.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	require.NoError(t, d.Decode(&c), name)
	return c
}

// TestContainerdDropIn: the drop-in disables the built-in content plugin,
// points the content and diff proxies at the DaemonSet's --address, selects
// the differ for both pull paths, and says what deploy/containerd-config.toml
// and the host installer's copy say.
func TestContainerdDropIn(t *testing.T) {
	m, _ := load(t)
	data := m.configMaps[0].Data
	require.Len(t, data, 1)
	drop := decodeContainerd(t, "drop-in", []byte(data["sharedcontent.toml"]))
	b, err := os.ReadFile("../containerd-config.toml")
	require.NoError(t, err)
	require.Equal(t, decodeContainerd(t, "deploy/containerd-config.toml", b), drop)
	// The copy the chart's host mode installs (internal/hostinstall, for
	// the default socket and platform).
	b, err = os.ReadFile("../../internal/hostinstall/sharedcontent.toml")
	require.NoError(t, err)
	require.Equal(t, drop, decodeContainerd(t, "internal/hostinstall/sharedcontent.toml", b))

	require.Equal(t, 3, drop.Version)
	require.Equal(t, []string{"io.containerd.content.v1.content"}, drop.DisabledPlugins)
	address := flagValues(t, onlyContainer(t, m.daemonSets[0].Spec.Template.Spec))["address"]
	require.Equal(t, "content", drop.ProxyPlugins["sharedcontent"].Type)
	require.Equal(t, "diff", drop.ProxyPlugins["sharedcontent-diff"].Type)
	for name, p := range drop.ProxyPlugins {
		require.Equal(t, address, p.Address, "proxy_plugins.%s.address is the DaemonSet's --address", name)
	}
	require.Equal(t, "sharedcontent-diff", drop.Plugins.DiffService.Default[0])
	require.NotEmpty(t, drop.Plugins.Transfer.UnpackConfig)
	for _, u := range drop.Plugins.Transfer.UnpackConfig {
		require.Equal(t, "sharedcontent-diff", u.Differ)
	}
}

// TestServiceMonitors: each ServiceMonitor selects a Service and scrapes a
// port it has; the coordinator's (whose /metrics is authenticated) sends
// the token Secret.
func TestServiceMonitors(t *testing.T) {
	m, _ := load(t)
	for _, sm := range m.serviceMonitor {
		svc, ep := scrapedService(t, m, sm)
		require.Equal(t, "/metrics", ep.Path)
		if svc.Name == m.statefulSets[0].Spec.ServiceName {
			require.NotNil(t, ep.Authorization, "the coordinator's /metrics needs the token")
			require.Equal(t, tokenSecret, ep.Authorization.Credentials.Name)
			require.Equal(t, "token", ep.Authorization.Credentials.Key)
		}
	}
}

// scrapedService checks that sm selects exactly one Service of m and
// scrapes, with its one endpoint, a port that Service has.
func scrapedService(t *testing.T, m *manifests, sm *monitoringv1.ServiceMonitor) (*corev1.Service, monitoringv1.Endpoint) {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	require.NoError(t, err)
	var svc *corev1.Service
	for _, s := range m.services {
		if sel.Matches(labels.Set(s.Labels)) {
			require.Nil(t, svc, "ServiceMonitor %s selects one Service", sm.Name)
			svc = s
		}
	}
	require.NotNil(t, svc, "ServiceMonitor %s selects no Service", sm.Name)
	require.Len(t, sm.Spec.Endpoints, 1)
	ep := sm.Spec.Endpoints[0]
	require.True(t, slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }),
		"ServiceMonitor %s scrapes port %q of Service %s", sm.Name, ep.Port, svc.Name)
	return svc, ep
}
