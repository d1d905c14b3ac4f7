package etcdtest

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStartRetriesTakenPort: a member whose port another process took
// exits while starting, and Start starts the cluster again on other ports.
func TestStartRetriesTakenPort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	calls := 0
	pickPorts = func(t testing.TB, n int) []int {
		calls++
		ports := freePorts(t, n)
		if calls == 1 {
			ports[0] = taken.Addr().(*net.TCPAddr).Port
		}
		return ports
	}
	defer func() { pickPorts = freePorts }()
	c := Start(t, Options{Members: 1})
	require.Equal(t, 2, calls, "started again after the taken port")
	_, err = c.Client(t).Put(t.Context(), "k", "v")
	require.NoError(t, err)
}
