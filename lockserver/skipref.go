package lockserver

import (
	"context"

	"github.com/containerd/log"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// A skip that adds the waiter's reference (docs/design.md §10.6, lever c).
// A pull request may ask for it (api.LockRequest.AddRef): its node has
// journaled its use of the blob first, and would send POST /refs/add
// right after the skip. The coordinator records that reference instead:
//
//   - for the waiters queued when the holder unlocks with success, in the
//     holder's own write (references.recordSuccess): one commit for the
//     whole queue, and each waiter's skip says RefAdded;
//   - for a request answered skip at once (a retained success), by the
//     reference's own path (references.addRef, with its rules: a delete in
//     flight, the reference rule) before the answer.
//
// A reference that cannot be recorded is no error: the answer is skip
// without RefAdded and the node adds its reference itself, as a node that
// did not ask does; so does a node whose coordinator does not know the
// field (it is ignored, and never answered).

// skipAddsRef records the reference that req asked for when resp, the
// answer to req (err nil), is a skip without it.
func (c *Coordinator) skipAddsRef(ctx context.Context, req api.LockRequest, resp api.LockResponse, err error) (api.LockResponse, error) {
	if err != nil || !resp.Skip || !req.AddRef || resp.RefAdded {
		return resp, err
	}
	if _, rerr := c.references.addRef(ctx, req.ResourceID, req.NodeID, false); rerr != nil {
		log.G(ctx).WithError(rerr).WithField("resource", req.ResourceID).WithField("node", req.NodeID).
			Debug("skip without the reference it asked for; the node adds it")
		return resp, nil
	}
	resp.RefAdded = true
	return resp, nil
}
