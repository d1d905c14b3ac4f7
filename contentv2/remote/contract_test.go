package remote_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/contentv2/coordinatortest"
	"github.com/sharedcontent/sharedcontent/lockserver"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
)

// realCluster is a real coordinator on loopback HTTP, reached by each node
// through remote.New.
type realCluster struct{ coord *lockservertest.Server }

func (c realCluster) Node(t *testing.T, id string) contentv2.Coordinator { return node(t, c.coord, id) }

func (c realCluster) Restart(*testing.T) { c.coord.Restart() }

func (c realCluster) Queued(t *testing.T, op api.OperationType, resource string) int {
	st, err := c.coord.Core().Status(t.Context(), op, resource, "", "")
	require.NoError(t, err)
	return st.QueueLength
}

// TestContract holds the real coordinator to contentv2.Coordinator's
// contract; contentv2's fake is held to the same one. The coordinator
// runs without a reap grace (docs/design.md §8.12), which the fake does
// not model: its reap deletes are judged by the reap lock and the
// references alone.
func TestContract(t *testing.T) {
	coordinatortest.Run(t, func(t *testing.T) coordinatortest.Cluster {
		cfg := lockserver.DefaultConfig()
		cfg.SessionTTL = sessionTTL
		cfg.ReapGrace = 0
		return realCluster{lockservertest.Start(t, lockservertest.WithConfig(cfg))}
	})
}
