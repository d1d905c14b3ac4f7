package lockserver

import (
	"fmt"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// A sync request's step (sync.go): named by the node, checked against
// the fields an older coordinator reads; or, from an older node, told
// from them.

// validateSync checks what a sync request is alone, before it takes a
// sync slot: the IDs, the chunk's size, the shape of a hash step, and
// that the step it names agrees with its fields. Refusals are
// api.ErrInvalidArgument and change nothing.
func validateSync(node string, req api.SyncRequest) error {
	if err := validateID("node_id", node); err != nil {
		return err
	}
	if err := validateID("sync_id", req.SyncID); err != nil {
		return err
	}
	if len(req.ResourceIDs) > api.MaxSyncChunk {
		return fmt.Errorf("sync of node %s: %d resource IDs in one chunk, at most %d: %w",
			node, len(req.ResourceIDs), api.MaxSyncChunk, api.ErrInvalidArgument)
	}
	for _, id := range req.ResourceIDs {
		if err := validateResourceID(id); err != nil {
			return err
		}
	}
	if err := validateHashStep(node, req); err != nil {
		return err
	}
	return validateStep(node, req)
}

// validateStep checks that the step req names, if any, is one and agrees
// with its fields: an older coordinator, which ignores the step, must
// read the same request from them.
func validateStep(node string, req api.SyncRequest) error {
	var want string
	switch req.Step {
	case "":
		return nil
	case api.SyncStepAnnounce:
		if !announceShaped(req) {
			want = "carries no resource IDs, hash or done, and has offset 0"
		}
	case api.SyncStepHash:
		if !isHashStep(req) {
			want = "carries hash or bucket_hashes"
		}
	case api.SyncStepChunk:
		if req.Done || isHashStep(req) {
			want = "is not done and carries no hash"
		}
	case api.SyncStepDone:
		if !req.Done {
			want = "has done: true"
		}
	default:
		return fmt.Errorf("sync %s of node %s: unknown step %q (want %s, %s, %s or %s): %w", req.SyncID, node, req.Step,
			api.SyncStepAnnounce, api.SyncStepHash, api.SyncStepChunk, api.SyncStepDone, api.ErrInvalidArgument)
	}
	if want != "" {
		return fmt.Errorf("sync %s of node %s: a %s step %s: %w", req.SyncID, node, req.Step, want, api.ErrInvalidArgument)
	}
	return nil
}

// announceShaped reports whether req has an announcement's fields.
func announceShaped(req api.SyncRequest) bool {
	return len(req.ResourceIDs) == 0 && !req.Done && !isHashStep(req) && (req.Offset == nil || *req.Offset == 0)
}

// announces reports whether req starts a sync: an announcement, named
// or, from an older node, shaped as one.
func announces(req api.SyncRequest) bool {
	return req.Step == api.SyncStepAnnounce || req.Step == "" && announceShaped(req)
}

// stepOf is req's step, of the sync s it belongs to: the one it names,
// or, for an older node's request, the one its fields and s tell (a
// request with nothing in it is the announcement while s has received
// nothing, else an empty chunk).
func stepOf(req api.SyncRequest, s *nodeSync) api.SyncStep {
	switch {
	case req.Step != "":
		return req.Step
	case isHashStep(req):
		return api.SyncStepHash
	case req.Done:
		return api.SyncStepDone
	case len(req.ResourceIDs) == 0 && len(s.refs) == 0 && s.buckets == nil:
		return api.SyncStepAnnounce
	}
	return api.SyncStepChunk
}
