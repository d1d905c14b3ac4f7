package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// fleet is N nodes with their session loops running.
type fleet struct {
	nodes  []*node
	a      *answers
	ctx    context.Context // the session loops'
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newFleet builds n nodes (cfg.ShortConns connections each for their
// short requests) against the coordinator at serverURL, with
// journals journal(i) (nil: empty); start starts their session loops.
func newFleet(n int, cfg Config, serverURL string, journal func(i int) []digest.Digest) (*fleet, error) {
	if err := checkLoopback(n); err != nil {
		return nil, err
	}
	a := &answers{}
	nodes, err := newNodes(n, cfg, serverURL, a)
	if err != nil {
		return nil, err
	}
	if journal != nil {
		for i, nd := range nodes {
			nd.journal = journal(i)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &fleet{nodes: nodes, a: a, ctx: ctx, cancel: cancel}, nil
}

// start starts the session loops of nodes, each at a random point of its
// first interval (real nodes started at different times renew at different
// times).
func (f *fleet) start(nodes []*node) {
	for _, nd := range nodes {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(rand.N(nd.interval())):
			}
			nd.runSessions(f.ctx)
		}()
	}
}

// closeStores closes the nodes' contentv2 stores (each ends its session),
// a wave at a time.
func (f *fleet) closeStores() {
	for i := 0; i < len(f.nodes); i += setUpWave {
		var wg sync.WaitGroup
		for _, nd := range f.nodes[i:min(len(f.nodes), i+setUpWave)] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nd.closeStore()
			}()
		}
		wg.Wait()
	}
}

// stop ends the session loops and closes the clients.
func (f *fleet) stop() {
	f.cancel()
	f.wg.Wait()
	closeNodes(f.nodes)
}

// waitSynced waits until every node of nodes is synced in epoch, or
// timeout; it returns when the last one synced and how many did not.
func waitSynced(nodes []*node, epoch uint64, timeout time.Duration) (last time.Time, unsynced int) {
	deadline := time.Now().Add(timeout)
	for {
		last, unsynced = time.Time{}, 0
		for _, n := range nodes {
			ok, at := n.syncedIn(epoch)
			if !ok {
				unsynced++
			} else if at.After(last) {
				last = at
			}
		}
		if unsynced == 0 || time.Now().After(deadline) {
			return last, unsynced
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// maxGap is the longest time any node went without a session answer.
func (f *fleet) maxGap() time.Duration {
	now := time.Now()
	var g time.Duration
	for _, n := range f.nodes {
		g = max(g, n.gap(now))
	}
	return g
}

func (f *fleet) resetGaps() {
	for _, n := range f.nodes {
		n.resetGap()
	}
}

// clusterEpoch asks the coordinator for its epoch (GET /cluster).
func clusterEpoch(serverURL string) (uint64, error) {
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(serverURL + "/cluster")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /cluster: %s", resp.Status)
	}
	var c api.Cluster
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return 0, fmt.Errorf("GET /cluster: %w", err)
	}
	return c.Epoch, nil
}
