package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	o, err := parse([]string{"--root", "/shared", "--node-id", "n1"})
	require.NoError(t, err)
	require.Equal(t, defaultAddress, o.address)
	require.Empty(t, o.lockServer, "embedded coordinator by default")
	require.Equal(t, 15*time.Second, o.embedded.LeaseTTL)

	t.Setenv("SHAREDCONTENT_LOCK_SERVER", "http://coordinator:8642")
	t.Setenv("SHAREDCONTENT_LEASE_TTL", "20s")
	o, err = parse([]string{"--root", "/shared"})
	require.NoError(t, err)
	require.Equal(t, "http://coordinator:8642", o.lockServer)
	require.Equal(t, 20*time.Second, o.embedded.LeaseTTL)

	_, err = parse([]string{"--root", "/shared", "--lock-listen", ":8642"})
	require.ErrorContains(t, err, "--lock-listen")
	t.Setenv("SHAREDCONTENT_LOCK_SERVER", "")
	_, err = parse(nil)
	require.ErrorContains(t, err, "--root is required")
	_, err = parse([]string{"--root", "/shared", "stray"})
	require.ErrorContains(t, err, "unexpected arguments")
}
