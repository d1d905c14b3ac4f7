package check

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

const (
	// helmRendered holds `helm template` of the chart for each values file
	// of its ci/ (make helm-render writes them, make helm-check checks
	// they are current).
	helmRendered = "testdata/helm"
	chartDir     = "../helm/sharedcontent"
)

// loadRendered decodes one rendered chart strictly.
func loadRendered(t *testing.T, file string) *manifests {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	m := &manifests{}
	docs := documents(b)
	require.NotEmpty(t, docs, "%s holds no object", file)
	for i, doc := range docs {
		require.NoError(t, m.add(doc), "%s, document %d", file, i+1)
	}
	return m
}

// renderedFiles are the rendered charts, one per ci/ values file.
func renderedFiles(t *testing.T) map[string]string {
	t.Helper()
	values, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, values)
	files := map[string]string{}
	for _, v := range values {
		name := strings.TrimSuffix(filepath.Base(v), "-values.yaml")
		files[name] = filepath.Join(helmRendered, name+".yaml")
	}
	rendered, err := filepath.Glob(filepath.Join(helmRendered, "*.yaml"))
	require.NoError(t, err)
	require.Len(t, rendered, len(files), "one rendered file per values file in %s/ci: make helm-render", chartDir)
	return files
}

// requireSecretFile checks that p is key of Secret secret, mounted read
// only with a mode that the daemons accept (not readable by others).
func requireSecretFile(t *testing.T, spec corev1.PodSpec, c corev1.Container, p, secret, key string) {
	t.Helper()
	v, vm := mountOf(t, spec, c, p)
	require.NotNil(t, v, "%s: volume %s is not defined", p, vm.Name)
	require.NotNil(t, v.Secret, "%s is in volume %s, not a Secret", p, v.Name)
	require.Equal(t, secret, v.Secret.SecretName)
	require.Equal(t, key, path.Base(p))
	require.Equal(t, vm.MountPath, path.Dir(p))
	require.NotNil(t, v.Secret.DefaultMode, "the default 0644 is refused: set defaultMode")
	require.Zero(t, *v.Secret.DefaultMode&0o007, "files readable by others are refused: defaultMode %#o", *v.Secret.DefaultMode)
	require.True(t, vm.ReadOnly)
}

// requireHostFile checks that p is in a hostPath volume mounted at its own
// path, read only.
func requireHostFile(t *testing.T, spec corev1.PodSpec, c corev1.Container, p string) {
	t.Helper()
	requireHostPath(t, spec, c, p)
	_, vm := mountOf(t, spec, c, p)
	require.True(t, vm.ReadOnly, "%s is mounted read only", p)
}

// TestHelmRendered: every rendering of the chart decodes strictly, and its
// objects fit together: the node daemon reaches the coordinator's Service
// with files that are mounted, on the host's own paths; the coordinator
// keeps its database on the PVC, as user 65532; every ServiceMonitor
// selects one Service and one of its ports.
func TestHelmRendered(t *testing.T) {
	for name, file := range renderedFiles(t) {
		t.Run(name, func(t *testing.T) {
			m := loadRendered(t, file)
			var coordinatorSvc *corev1.Service
			var coordinator corev1.Container
			if len(m.statefulSets) > 0 {
				coordinatorSvc, coordinator = checkHelmCoordinator(t, m)
			}
			require.Len(t, m.daemonSets, 1)
			checkHelmNode(t, m, coordinatorSvc, coordinator)
			checkHelmServiceMonitors(t, m)
			for _, cm := range m.configMaps {
				want, err := os.ReadFile("../grafana/sharedcontent.json")
				require.NoError(t, err)
				require.JSONEq(t, string(want), cm.Data["sharedcontent.json"], "the dashboard ConfigMap is deploy/grafana's")
			}
		})
	}
}

func checkHelmCoordinator(t *testing.T, m *manifests) (*corev1.Service, corev1.Container) {
	t.Helper()
	require.Len(t, m.statefulSets, 1)
	st := m.statefulSets[0]
	spec := st.Spec.Template.Spec
	c := onlyContainer(t, spec)
	require.Equal(t, []string{"/usr/local/bin/sharedcontent-lockserver"}, c.Command)
	f := flagValues(t, c)
	hp := port(t, c, "http")
	require.Equal(t, listenPort(t, f["listen"]), fmt.Sprint(hp.ContainerPort))
	svc := serviceSelecting(t, m, st.Spec.Template.Labels)
	requireServicePort(t, svc, c, "http")
	if _, ha := f["etcd-endpoints"]; ha {
		checkHelmReplicas(t, m, st, c, f, svc)
	} else {
		require.Equal(t, int32(1), *st.Spec.Replicas, "one coordinator per database")
		v, vm := mountOf(t, spec, c, f["data-dir"])
		require.Nil(t, v, "--data-dir is not on a pod volume (emptyDir loses the database)")
		require.True(t, slices.ContainsFunc(st.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == vm.Name }),
			"--data-dir %s is on the PVC", f["data-dir"])
		require.Equal(t, st.Spec.ServiceName, svc.Name)
		require.Empty(t, m.pdbs)
	}
	require.Equal(t, int64(65532), *spec.SecurityContext.RunAsUser, "the image's non-root user")
	require.True(t, *spec.SecurityContext.RunAsNonRoot)
	for flag, key := range map[string]string{"auth-token-file": "token", "admin-token-file": "token", "node-tokens-file": "node-tokens",
		"tls-cert": "tls.crt", "tls-key": "tls.key", "tls-client-ca": "ca.crt",
		"etcd-cacert": "ca.crt", "etcd-cert": "tls.crt", "etcd-key": "tls.key"} {
		if p, ok := f[flag]; ok {
			v, _ := mountOf(t, spec, c, p)
			require.NotNil(t, v, "--%s %s", flag, p)
			require.NotNil(t, v.Secret, "--%s %s", flag, p)
			requireSecretFile(t, spec, c, p, v.Secret.SecretName, key)
		}
	}
	if f["tls-node-identity"] == "true" || f["node-tokens-file"] != "" {
		require.NotContains(t, f, "auth-token-file", "a shared token with node identities is refused")
	}
	return svc, c
}

// checkHelmReplicas checks the chart's replicas on etcd (docs/helm.md
// "HA on etcd"): checkReplicas, each advertising its name in the headless
// Service with the namespace, in the scheme it serves.
func checkHelmReplicas(t *testing.T, m *manifests, st *appsv1.StatefulSet, c corev1.Container, f map[string]string, svc *corev1.Service) {
	t.Helper()
	peers := checkReplicas(t, m, st, c, f, svc)
	u, err := url.Parse(f["advertise-url"])
	require.NoError(t, err)
	require.Equal(t, "$(POD_NAME)."+peers.Name+"."+st.Namespace+".svc", u.Hostname())
	_, https := f["tls-cert"]
	require.Equal(t, map[bool]string{true: "https", false: "http"}[https], u.Scheme)
}

// nodeArgs splits the node container's arguments: in host mode
// (`install [flags] -- DAEMON FLAGS`) the installer's flags, the pod's
// files it copies onto the host (--file SOURCE:TARGET, by target) and the
// daemon's flags; in pod mode the daemon's flags only.
func nodeArgs(t *testing.T, c corev1.Container) (host bool, install map[string]string, files map[string]string, daemon map[string]string) {
	t.Helper()
	if len(c.Args) == 0 || c.Args[0] != "install" {
		return false, nil, nil, flagValues(t, c)
	}
	sep := slices.Index(c.Args, "--")
	require.Positive(t, sep, "install ... -- DAEMON FLAGS")
	files = map[string]string{}
	var rest []string
	for _, a := range c.Args[1:sep] {
		if f, ok := strings.CutPrefix(a, "--file="); ok {
			src, dst, ok := strings.Cut(f, ":")
			require.True(t, ok, a)
			files[dst] = src
			continue
		}
		rest = append(rest, a)
	}
	ic, dc := c, c
	ic.Args, dc.Args = rest, c.Args[sep+1:]
	return true, flagValues(t, ic), files, flagValues(t, dc)
}

func checkHelmNode(t *testing.T, m *manifests, coordinatorSvc *corev1.Service, coordinator corev1.Container) {
	t.Helper()
	ds := m.daemonSets[0]
	spec := ds.Spec.Template.Spec
	c := onlyContainer(t, spec)
	require.Equal(t, []string{"/usr/local/bin/containerd-sharedcontent"}, c.Command)
	require.Equal(t, "system-node-critical", spec.PriorityClassName)
	require.Contains(t, spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists}, "tolerates every taint")
	require.True(t, *c.SecurityContext.Privileged, "the diff service mounts snapshots; the installer enters PID 1's namespaces")
	require.Equal(t, int64(0), *c.SecurityContext.RunAsUser, "root: the image's default user is not")

	host, install, files, f := nodeArgs(t, c)
	if host {
		checkHelmHostMode(t, m, install, files, f)
	} else {
		checkHelmPodMode(t, spec, c, f)
	}

	cf := flagValues(t, coordinator)
	if _, ha := cf["etcd-endpoints"]; ha {
		// Each replica as it advertises itself: a node follows a
		// not_leader hint only to a URL of its list.
		require.Equal(t, replicaURLs(m.statefulSets[0], cf["advertise-url"]), f["coordinator"], "--coordinator lists every replica")
		require.Equal(t, cf["tls-cert"] != "", f["coordinator-ca"] != "", "--coordinator-ca exactly when the coordinator serves HTTPS")
		coordinatorSvc = nil // checked
	}
	u, err := url.Parse(strings.Split(f["coordinator"], ",")[0])
	require.NoError(t, err)
	if coordinatorSvc != nil {
		host, _, _ := strings.Cut(u.Hostname(), ".")
		require.Equal(t, coordinatorSvc.Name, host, "--coordinator names the coordinator's Service")
		require.Equal(t, fmt.Sprint(coordinatorSvc.Spec.Ports[0].Port), u.Port())
		_, https := flagValues(t, coordinator)["tls-cert"]
		require.Equal(t, map[bool]string{true: "https", false: "http"}[https], u.Scheme)
		require.Equal(t, https, f["coordinator-ca"] != "", "--coordinator-ca exactly when the coordinator serves HTTPS")
	}
	_, clientCA := flagValues(t, coordinator)["tls-client-ca"]
	if clientCA {
		require.NotEmpty(t, f["node-cert"], "mTLS: the node sends a certificate")
	}

	mp := port(t, c, "metrics")
	require.Equal(t, listenPort(t, f["metrics-listen"]), fmt.Sprint(mp.ContainerPort))
	requireServicePort(t, serviceSelecting(t, m, ds.Spec.Template.Labels), c, "metrics")
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "metrics", c.ReadinessProbe.HTTPGet.Port.String())
}

// checkHelmPodMode: the daemon runs in the pod, with the host's own
// paths mounted at the same paths, as the node named by spec.nodeName.
func checkHelmPodMode(t *testing.T, spec corev1.PodSpec, c corev1.Container, f map[string]string) {
	t.Helper()
	require.False(t, spec.HostPID)
	require.Empty(t, spec.ServiceAccountName, "pod mode asks the API server nothing")
	require.False(t, *spec.AutomountServiceAccountToken)
	require.Equal(t, "spec.nodeName", env(c, "SHAREDCONTENT_NODE_ID").ValueFrom.FieldRef.FieldPath)
	for _, p := range []string{f["root"], f["address"], f["state-dir"], "/var/lib/containerd"} {
		require.NotEmpty(t, p)
		requireHostPath(t, spec, c, p)
	}
	if p, ok := f["auth-token-file"]; ok {
		v, _ := mountOf(t, spec, c, p)
		require.NotNil(t, v)
		require.NotNil(t, v.Secret)
		requireSecretFile(t, spec, c, p, v.Secret.SecretName, "token")
	}
	for _, flag := range []string{"node-token-file", "node-cert", "node-key"} {
		if p, ok := f[flag]; ok {
			requireHostFile(t, spec, c, p)
		}
	}
	if p, ok := f["coordinator-ca"]; ok {
		v, _ := mountOf(t, spec, c, p)
		require.NotNil(t, v.Secret, "--coordinator-ca")
		require.Equal(t, "ca.crt", path.Base(p))
	}
	// The doctor init container reads containerd's config at the host's
	// own path (its imports name host paths), from the same image.
	for _, ic := range spec.InitContainers {
		require.Equal(t, "doctor", ic.Name)
		require.Equal(t, c.Image, ic.Image)
		require.Equal(t, []string{"/usr/local/bin/sharedcontentctl"}, ic.Command)
		require.Equal(t, []string{"doctor", "--config-only"}, ic.Args[:2])
		config, ok := strings.CutPrefix(ic.Args[2], "--containerd-config=")
		require.True(t, ok, ic.Args[2])
		requireHostFile(t, spec, ic, config)
	}
}

// checkHelmHostMode: the pod installs the daemon onto the host: hostPID
// (systemctl in PID 1's namespaces) and hostNetwork (the probe reaches the
// host daemon's /readyz), the host's / at --host-root, no init container
// (its config check would fail before the drop-in exists); the daemon's
// files are host paths, its secrets copied from the pod's Secret volumes;
// its node ID is the node's name; the pod may get its own DaemonSet, and
// nothing else.
func checkHelmHostMode(t *testing.T, m *manifests, install, files, f map[string]string) {
	t.Helper()
	ds := m.daemonSets[0]
	spec := ds.Spec.Template.Spec
	c := onlyContainer(t, spec)
	require.True(t, spec.HostPID, "nsenter --target 1")
	require.True(t, spec.HostNetwork, "the readiness probe is the host daemon's /readyz")
	require.Equal(t, corev1.DNSClusterFirstWithHostNet, spec.DNSPolicy)
	require.Empty(t, spec.InitContainers)
	require.GreaterOrEqual(t, *spec.TerminationGracePeriodSeconds, int64(90), "the keeper's uninstall restarts containerd")

	v, vm := mountOf(t, spec, c, install["host-root"])
	require.NotNil(t, v.HostPath)
	require.Equal(t, "/", v.HostPath.Path)
	require.Equal(t, install["host-root"], vm.MountPath)
	require.Equal(t, ds.Name, install["daemonset"])
	require.True(t, strings.HasPrefix(install["containerd-config"], "/etc/containerd/"), install["containerd-config"])

	require.Equal(t, "$(NODE_NAME)", f["node-id"])
	require.Equal(t, "spec.nodeName", env(c, "NODE_NAME").ValueFrom.FieldRef.FieldPath)
	require.Nil(t, env(c, "SHAREDCONTENT_NODE_ID"), "the host service's settings are its flags")
	for _, p := range []string{f["root"], f["address"], f["state-dir"]} {
		require.True(t, path.IsAbs(p), p)
	}
	// Every file the daemon reads from a Secret is copied onto the host,
	// at the path its flag names.
	for flag, key := range map[string]string{"auth-token-file": "token", "coordinator-ca": "ca.crt"} {
		p, ok := f[flag]
		if !ok {
			continue
		}
		src, ok := files[p]
		require.True(t, ok, "--%s %s: the installer copies it onto the host (--file)", flag, p)
		v, _ := mountOf(t, spec, c, src)
		require.NotNil(t, v.Secret, "--%s", flag)
		require.Equal(t, key, path.Base(src))
		if flag == "auth-token-file" {
			requireSecretFile(t, spec, c, src, v.Secret.SecretName, key)
		}
	}
	require.Len(t, files, len(f)-len(without(f, "auth-token-file", "coordinator-ca")), "no file copied that no flag names")

	// RBAC: get on this DaemonSet only, bound to the pod's account.
	require.Len(t, m.serviceAccts, 1)
	require.Equal(t, spec.ServiceAccountName, m.serviceAccts[0].Name)
	require.Len(t, m.roles, 1)
	require.Len(t, m.roleBindings, 1)
	rb := m.roleBindings[0]
	require.Equal(t, "Role", rb.RoleRef.Kind)
	require.Equal(t, m.roles[0].Name, rb.RoleRef.Name)
	require.Len(t, rb.Subjects, 1)
	require.Equal(t, spec.ServiceAccountName, rb.Subjects[0].Name)
	require.Equal(t, ds.Namespace, rb.Subjects[0].Namespace)
	require.Equal(t, ds.Namespace, m.roles[0].Namespace)
	require.Len(t, m.roles[0].Rules, 1)
	r := m.roles[0].Rules[0]
	require.Equal(t, []string{"apps"}, r.APIGroups)
	require.Equal(t, []string{"daemonsets"}, r.Resources)
	require.Equal(t, []string{ds.Name}, r.ResourceNames)
	require.Equal(t, []string{"get"}, r.Verbs)
}

// without returns m less keys.
func without(m map[string]string, keys ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

func checkHelmServiceMonitors(t *testing.T, m *manifests) {
	t.Helper()
	for _, sm := range m.serviceMonitor {
		scrapedService(t, m, sm)
	}
}

// TestHelmDashboardCopy: the chart's copy of the dashboard (a chart reads
// only its own files) is deploy/grafana's.
func TestHelmDashboardCopy(t *testing.T) {
	want, err := os.ReadFile("../grafana/sharedcontent.json")
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(chartDir, "files", "grafana-dashboard.json"))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "cp deploy/grafana/sharedcontent.json %s/files/grafana-dashboard.json", chartDir)
}

// TestHelmMatchesKustomize: the chart's node daemon in pod mode (the
// kustomization's) and its coordinator take the flags deploy/kubernetes
// gives them, with the same paths (only the coordinator's URL and the log
// level differ).
func TestHelmMatchesKustomize(t *testing.T) {
	k, _ := load(t)
	h := loadRendered(t, renderedFiles(t)["pod"])
	kf := flagValues(t, onlyContainer(t, k.daemonSets[0].Spec.Template.Spec))
	hf := flagValues(t, onlyContainer(t, h.daemonSets[0].Spec.Template.Spec))
	for _, f := range []string{"coordinator", "log-level"} {
		delete(kf, f)
		delete(hf, f)
	}
	require.Equal(t, kf, hf)
	kf = flagValues(t, onlyContainer(t, k.statefulSets[0].Spec.Template.Spec))
	hf = flagValues(t, onlyContainer(t, h.statefulSets[0].Spec.Template.Spec))
	delete(hf, "log-level")
	require.Equal(t, kf, hf)
}
