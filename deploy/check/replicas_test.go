package check

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// checkReplicas checks what the chart's and the overlay's coordinator
// replicas on etcd share (docs/kubernetes.md "HA on etcd"): several
// replicas, updated OnDelete, no volume; etcd URLs (as flags); a headless Service
// (serviceName) publishing every replica, ready or not, beside svc, the
// Service of ready replicas (the leader: readiness is /readyz unless the
// probes cannot speak HTTPS); each replica advertising
// $(POD_NAME).PEERS... on its port, POD_NAME its pod's name; one replica
// per node, one disrupted at a time. It returns the headless Service.
func checkReplicas(t *testing.T, m *manifests, st *appsv1.StatefulSet, c corev1.Container, f map[string]string, svc *corev1.Service) *corev1.Service {
	t.Helper()
	spec := st.Spec.Template.Spec
	require.GreaterOrEqual(t, *st.Spec.Replicas, int32(2), "a standby to take over")
	require.Empty(t, st.Spec.VolumeClaimTemplates, "the state is in etcd")
	require.Equal(t, appsv1.OnDeleteStatefulSetStrategyType, st.Spec.UpdateStrategy.Type, "a standby is never ready: a rolling update would stall")
	require.NotContains(t, f, "data-dir")
	if eps, ok := f["etcd-endpoints"]; ok { // or a variable (the overlay's)
		requireEtcdURLs(t, eps)
	}

	require.NotEqual(t, st.Spec.ServiceName, svc.Name, "the nodes' Service is not the headless one")
	require.False(t, svc.Spec.PublishNotReadyAddresses, "the nodes' Service routes to the ready replica: the leader")
	var peers *corev1.Service
	for _, s := range m.services {
		if s.Name == st.Spec.ServiceName {
			peers = s
		}
	}
	require.NotNil(t, peers, "serviceName %s is a Service", st.Spec.ServiceName)
	require.Equal(t, corev1.ClusterIPNone, peers.Spec.ClusterIP)
	require.True(t, peers.Spec.PublishNotReadyAddresses, "standbys resolve too")
	require.Equal(t, svc.Spec.Selector, peers.Spec.Selector)
	requireServicePort(t, peers, c, "http")

	// --advertise-url=SCHEME://$(POD_NAME).PEERS...:PORT (kubelet expands
	// $(VAR) in args).
	u, err := url.Parse(f["advertise-url"])
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(u.Hostname(), "$(POD_NAME)."+peers.Name), u.Hostname())
	require.Equal(t, fmt.Sprint(port(t, c, "http").ContainerPort), u.Port())
	require.Equal(t, "metadata.name", env(c, "POD_NAME").ValueFrom.FieldRef.FieldPath)

	require.NotNil(t, c.ReadinessProbe)
	if f["tls-client-ca"] == "" {
		require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, "ready: the leader")
	}
	require.NotNil(t, spec.Affinity.PodAntiAffinity, "one replica per node")
	terms := spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	require.Len(t, terms, 1)
	require.Equal(t, "kubernetes.io/hostname", terms[0].TopologyKey)
	require.Equal(t, st.Spec.Selector.MatchLabels, terms[0].LabelSelector.MatchLabels)

	require.Len(t, m.pdbs, 1)
	pdb := m.pdbs[0]
	require.Equal(t, st.Spec.Selector.MatchLabels, pdb.Spec.Selector.MatchLabels)
	require.Equal(t, intstr.FromInt32(1), *pdb.Spec.MaxUnavailable, "one replica down at a time")
	return peers
}

// requireEtcdURLs checks a comma-separated list of etcd client URLs.
func requireEtcdURLs(t *testing.T, list string) {
	t.Helper()
	for _, e := range strings.Split(list, ",") {
		u, err := url.Parse(e)
		require.NoError(t, err)
		require.Contains(t, []string{"http", "https"}, u.Scheme, e)
		require.NotEmpty(t, u.Host, e)
	}
}

// replicaURLs is the --coordinator list of st's replicas, each URL its
// --advertise-url with its pod's name.
func replicaURLs(st *appsv1.StatefulSet, advertise string) string {
	var urls []string
	for i := range *st.Spec.Replicas {
		urls = append(urls, strings.Replace(advertise, "$(POD_NAME)", fmt.Sprintf("%s-%d", st.Name, i), 1))
	}
	return strings.Join(urls, ",")
}
