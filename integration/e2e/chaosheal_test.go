package e2e

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// chaosSyncTimeout bounds the cluster's recovery after the last fault:
// every node live and synced again.
const chaosSyncTimeout = 2 * time.Minute

// heal ends every fault (each fault healed itself; the links are set up
// again in case the test stopped in one) and waits until every node is a
// live and synced member.
func (ch *realChaos) heal() {
	for _, n := range ch.nodes {
		n.link.set(proxyUp)
	}
	start := time.Now()
	if err := ch.synced(nodeIDs(ch.c.nodes), chaosSyncTimeout); err != nil {
		ch.healError("after the last fault, the nodes are not all live and synced within %v: %v", chaosSyncTimeout, err)
		return
	}
	ch.t.Logf("chaos: every node live and synced %.1fs after the last fault", time.Since(start).Seconds())
}

// synced polls GET /nodes (the leading replica's, on etcd) until the
// members are exactly ids, each live and synced.
func (ch *realChaos) synced(ids []string, timeout time.Duration) error {
	want := sorted(ids)
	deadline := time.Now().Add(timeout)
	for {
		var m map[string]api.NodeStatus
		err := errNoLeader
		if ls := ch.coordinator(); ls != nil {
			m, err = ls.members()
		}
		if err == nil {
			var got, unsynced []string
			for id, s := range m {
				got = append(got, id)
				if !s.Live || !s.Synced {
					unsynced = append(unsynced, fmt.Sprintf("%s(live=%v synced=%v)", id, s.Live, s.Synced))
				}
			}
			if slices.Equal(want, sorted(got)) && len(unsynced) == 0 {
				return nil
			}
			err = fmt.Errorf("members %v; not synced: %v", sorted(got), sorted(unsynced))
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pullEverything makes every node pull every image (the nodes at once),
// each pull tried up to three times.
func (ch *realChaos) pullEverything() {
	var wg sync.WaitGroup
	for _, n := range ch.nodes {
		wg.Go(func() {
			for _, img := range ch.imgs {
				var err error
				for range 3 {
					if err = n.pull(img.Ref, chaosPullTimeout); err == nil {
						break
					}
					ch.t.Logf("chaos: after healing, %s pull %s: %v", n.id, imageName(img.Ref), err)
				}
				if err != nil {
					ch.healError("after healing, %s cannot pull %s: %v", n.id, imageName(img.Ref), err)
				}
			}
		})
	}
	wg.Wait()
}

// checkAll checks the invariant on every node once the faults have
// healed: then a failed read of an intact blob is an error too.
func (ch *realChaos) checkAll(when string) {
	const skipped = "check skipped (node unreachable)"
	ch.mu.Lock()
	before, skippedBefore := ch.readErrors, ch.ops[skipped]
	ch.mu.Unlock()
	for _, n := range ch.nodes {
		ch.check(n, when)
	}
	ch.mu.Lock()
	failed, unlisted := ch.readErrors-before, ch.ops[skipped]-skippedBefore
	ch.mu.Unlock()
	if failed > 0 || unlisted > 0 {
		ch.healError("%s: %d reads of intact blobs failed, %d nodes could not list their content", when, failed, unlisted)
	}
}

// removeEverything removes every image and lease from every node (with
// containerd's GC), then waits until nothing is left in the shared root:
// no blob, ingest or trash. The reaper reclaims what no node references.
func (ch *realChaos) removeEverything() {
	for _, n := range ch.nodes {
		ch.emptyNode(n)
	}
	start := time.Now()
	var left string
	for {
		left = ch.leftovers()
		if left == "" {
			ch.t.Logf("chaos: shared root empty %.1fs after the last removal", time.Since(start).Seconds())
			return
		}
		if time.Since(start) > chaosCleanTimeout {
			break
		}
		time.Sleep(time.Second)
	}
	ch.healError("%v after every node removed every image and lease, the shared root still holds %s", chaosCleanTimeout, left)
}

// emptyNode removes every image and lease of n, synchronously collected,
// and checks that its containerd then lists no content.
func (ch *realChaos) emptyNode(n *chaosNode) {
	out, err := n.ctr(time.Minute, "images", "ls", "-q")
	if err != nil {
		ch.healError("%s: %v", n.id, err)
		return
	}
	for _, ref := range strings.Fields(out) {
		if err := n.removeImage(ref); err != nil {
			ch.healError("%s: %v", n.id, err)
		}
	}
	// A pull killed with its containerd leaves its lease (and what it
	// holds) behind.
	out, err = n.ctr(time.Minute, "leases", "ls", "-q")
	if err != nil {
		ch.healError("%s: %v", n.id, err)
		return
	}
	if ids := strings.Fields(out); len(ids) > 0 {
		ch.t.Logf("chaos: %s: %d leases left by interrupted pulls", n.id, len(ids))
		if _, err := n.ctr(2*time.Minute, append([]string{"leases", "rm", "--sync"}, ids...)...); err != nil {
			ch.healError("%s: %v", n.id, err)
		}
	}
	list, err := n.contentList()
	if err != nil {
		ch.healError("%s: %v", n.id, err)
	} else if len(list) > 0 {
		ch.healError("%s's containerd still lists %d blobs after every image and lease was removed", n.id, len(list))
	}
}

// leftovers describes what is left in the shared root ("" for nothing).
func (ch *realChaos) leftovers() string {
	var parts []string
	for _, sub := range []string{"blobs/sha256", "ingest", ".trash"} {
		names, err := sharedFiles(ch.c.shared, sub)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", sub, err))
			continue
		}
		if len(names) == 0 {
			continue
		}
		var desc []string
		for _, name := range names {
			d := "sha256:" + name
			if img := ch.imagesOf(d); img != "" && sub == "blobs/sha256" {
				desc = append(desc, short(d)+" ("+img+")")
			} else {
				desc = append(desc, name)
			}
		}
		parts = append(parts, fmt.Sprintf("%s: %d [%s]", sub, len(names), strings.Join(desc, ", ")))
	}
	return strings.Join(parts, "; ")
}
