package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParseReplicaFlags: --etcd-endpoints makes a replica and needs
// --advertise-url; the environment spells the flags too; without
// endpoints nothing of a replica is asked for.
func TestParseReplicaFlags(t *testing.T) {
	o, err := parse(nil)
	require.NoError(t, err)
	require.False(t, o.etcd.Enabled(), "no endpoints: a single coordinator on bbolt")

	_, err = parse([]string{"--etcd-endpoints", "http://e0:2379"})
	require.ErrorContains(t, err, "--advertise-url")
	_, err = parse([]string{"--advertise-url", "http://c0:8642"})
	require.ErrorContains(t, err, "--etcd-endpoints")

	t.Setenv("SHAREDCONTENT_ETCD_ENDPOINTS", "http://e0:2379, http://e1:2379")
	o, err = parse([]string{"--advertise-url", "http://c0:8642", "--etcd-session-ttl", "7s"})
	require.NoError(t, err)
	require.Equal(t, []string{"http://e0:2379", "http://e1:2379"}, o.etcd.Endpoints)
	require.Equal(t, 7*time.Second, o.etcd.SessionTTL)
	require.Equal(t, "/sharedcontent/", o.etcd.Prefix)

	_, err = parse([]string{"--advertise-url", "http://c0:8642", "--etcd-session-ttl", "1500ms"})
	require.ErrorContains(t, err, "--etcd-session-ttl")
}

// TestParseRefusesLeaseOutlivingFailOpen: a delete lease must end before
// a cut-off member may fail open (docs/design.md §8.8); a setting that
// breaks it is refused at start, naming both flags and the bound.
func TestParseRefusesLeaseOutlivingFailOpen(t *testing.T) {
	_, err := parse([]string{"--lease-ttl", "60s", "--session-ttl", "15s"})
	require.ErrorContains(t, err, "--lease-ttl 1m0s")
	require.ErrorContains(t, err, "--session-ttl 15s")
	require.ErrorContains(t, err, "23.5s")
	_, err = parse([]string{"--lease-ttl", "23500ms", "--session-ttl", "15s"})
	require.Error(t, err, "equal to the fail-open delay")
	_, err = parse([]string{"--lease-ttl", "23s", "--session-ttl", "15s"})
	require.NoError(t, err)
	_, err = parse([]string{"--session-ttl", "3s"})
	require.ErrorContains(t, err, "--lease-ttl 15s", "a short session TTL needs a short lease TTL")
	_, err = parse(nil)
	require.NoError(t, err, "the defaults")
}
