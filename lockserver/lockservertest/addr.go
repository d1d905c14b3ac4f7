package lockservertest

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// FreeAddr returns a loopback address nothing listens on for now
// (connections to it are refused): where a test's client looks for a
// coordinator that is down, and where Start(WithAddr) brings one up.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", DefaultAddr)
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
