package lockserver

import (
	"context"
	"sync"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/internal/failpoint"
	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// An older node's re-sync (docs/design.md §10.7). An older node kept
// synced by its renewals (olderrenewal.go) sends its whole journal again
// every other renewal, and most of those journals are exactly what the
// coordinator stores: the sync writes nothing (sameAsStored). Such a
// re-sync takes no sync slot, so a fleet of older nodes does not crowd
// out the syncs that write (max-syncs):
//   - its announcement and chunks take none: they only buffer, within
//     the cluster-wide buffer bound like any sync's, and the sync keeps
//     the hash of what it buffered (nodeSync.sum) as it goes;
//   - its done takes none when that hash is the node's stored one (and
//     exact) and the node changed nothing meanwhile: the node is marked
//     synced at once, nothing written (full_equal);
//   - a done that will write takes a slot then, or is refused 429 as any
//     sync over max-syncs is; the buffer is kept, and the node's retry of
//     its done (the same chunk) finds it.
// A re-sync is one of a member in the older shape (no instance ID) that
// is synced, not being written, and whose stored hash is exact when the
// sync starts; every other sync takes a slot for each request, as before.

// olderResync reports whether req, node's sync request, is a step of an
// older node's re-sync (that one, or one it would start), which takes no
// sync slot. Callers hold mmu.
func (sy *syncs) olderResync(node string, req api.SyncRequest) bool {
	m := sy.mp.members[node]
	if m == nil || !olderShaped(req) {
		return false
	}
	if s := m.sync; s != nil && s.id == req.SyncID {
		return s.free
	}
	if m.synced && m.done == req.SyncID {
		return true // a retry of the done that synced it: answered again (syncStep)
	}
	return announces(req) && sy.resyncOf(m)
}

// olderShaped reports whether req has the older nodes' shape: no step,
// offset, hash, generation or echo.
func olderShaped(req api.SyncRequest) bool {
	return req.Step == "" && req.Offset == nil && !isHashStep(req) && req.Generation == "" && req.Echo == nil
}

// resyncOf reports whether a sync m starts now is an older node's
// re-sync: m is an older node, synced, not being written, and its stored
// hash is exact (a done can then be checked against it). Callers hold
// mmu.
func (sy *syncs) resyncOf(m *member) bool {
	if m.instance != "" || !m.synced || m.writing != nil {
		return false
	}
	_, exact := sy.refs.NodeHash(m.rec.ID)
	return exact
}

// admit takes a sync slot for req, unless it is a step of an older
// node's re-sync; held says whether it took one.
func (sy *syncs) admit(node string, req api.SyncRequest) (release func(), held bool, err error) {
	free := false
	if olderShaped(req) { // a current node's request does not take mmu here
		sy.mp.mmu.Lock()
		free = sy.olderResync(node, req)
		sy.mp.mmu.Unlock()
	}
	if free {
		return func() {}, false, nil
	}
	release, err = sy.admitSync(node)
	return release, err == nil, err
}

// addToSum adds to s's running hash an ID newly buffered, if s keeps one.
func (s *nodeSync) addToSum(id string) {
	if s.free {
		_, h := synchash.Of(id)
		s.sum.Count++
		s.sum.Hash += h
	}
}

// unchangedResync reports whether m's sync s, an older node's re-sync of
// generation, holds exactly the node's stored references and leaves its
// record as it is: its done writes nothing. Callers hold mmu.
func (sy *syncs) unchangedResync(m *member, s *nodeSync, generation string) bool {
	if !s.free || len(s.since) > 0 || generation != m.rec.Generation || m.rec.Bystander {
		return false
	}
	kept, exact := sy.refs.NodeHash(m.rec.ID)
	return exact && kept.Whole() == s.sum
}

// finishResync ends m's re-sync s, which writes nothing: the node is
// synced. Callers hold mmu.
func (sy *syncs) finishResync(ctx context.Context, m *member, s *nodeSync) api.SyncResponse {
	sy.endSync(m)
	// Nothing to write: the crash points of a sync's replace are here,
	// on either side of making the node synced (as for a sync by hash).
	failpoint.Inject(failpoint.CoordSyncBeforeReplace)
	m.markSynced(s.id, len(s.refs))
	failpoint.Inject(failpoint.CoordSyncAfterReplace)
	sy.syncMetrics.syncs.WithLabelValues("full_equal").Inc()
	log.G(ctx).WithField("node", m.rec.ID).WithField("refs", len(s.refs)).WithField("mode", "full_equal").Info("node synced")
	return api.SyncResponse{Received: len(s.refs), Synced: true}
}

// slotForWrite gives a done that will write, sent without a slot (an
// older node's re-sync whose journal changed), the slot its write needs,
// or refuses it busy (429), its buffer kept. Callers hold mmu.
func (sy *syncs) slotForWrite(node string, held bool) (release func(), err error) {
	if held {
		return nil, nil // the request's own slot, which SyncRefs gives back
	}
	release, err = sy.admitSync(node)
	if err != nil {
		return nil, err
	}
	return sync.OnceFunc(release), nil
}
