package lockserver

import (
	"fmt"
	"unicode/utf8"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

func validateKey(t api.OperationType, resourceID string) (typeIndex, error) {
	idx, ok := indexOf(t)
	if !ok {
		return 0, fmt.Errorf("type %q: must be pull, update or delete: %w", t, api.ErrInvalidArgument)
	}
	return idx, validateResourceID(resourceID)
}

func validateResourceID(id string) error {
	return validateString("resource_id", id, api.MaxResourceIDLen)
}

// validateID validates an ID field; a node_id may not start with
// api.PinHolderPrefix, which names the holders of pins' references
// (pins.go): a node of that ID would sync, forget or expire a pin's.
func validateID(field, v string) error {
	if err := validateString(field, v, api.MaxIDLen); err != nil {
		return err
	}
	if name, ok := api.PinName(v); ok && field == "node_id" {
		return fmt.Errorf("node_id %q: IDs starting with %q hold pins' references, not nodes' (sharedcontentctl pin rm %s drops pin %s): %w",
			v, api.PinHolderPrefix, name, name, api.ErrInvalidArgument)
	}
	return nil
}

// validateString accepts non-empty UTF-8 of at most max bytes without
// control characters.
func validateString(field, v string, max int) error {
	switch {
	case v == "":
		return fmt.Errorf("%s is required: %w", field, api.ErrInvalidArgument)
	case len(v) > max:
		return fmt.Errorf("%s is %d bytes, more than %d: %w", field, len(v), max, api.ErrInvalidArgument)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s is not valid UTF-8: %w", field, api.ErrInvalidArgument)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("%s contains control character %U: %w", field, r, api.ErrInvalidArgument)
		}
	}
	return nil
}

// validateQuery checks a status or subscription query: a request is named
// by its node and its request ID together.
func validateQuery(typ api.OperationType, resourceID, nodeID, requestID string) (typeIndex, error) {
	t, err := validateKey(typ, resourceID)
	if err == nil && nodeID != "" {
		err = validateID("node_id", nodeID)
	}
	if err == nil && requestID != "" {
		if nodeID == "" {
			err = fmt.Errorf("request_id %q needs its node_id: a request is known by both: %w", requestID, api.ErrInvalidArgument)
		} else {
			err = validateID("request_id", requestID)
		}
	}
	return t, err
}

// validateLock checks a lock request and gives it a request_id if it has none.
func validateLock(req *api.LockRequest) (typeIndex, error) {
	t, err := validateKey(req.Type, req.ResourceID)
	if err != nil {
		return 0, err
	}
	if err := validateID("node_id", req.NodeID); err != nil {
		return 0, err
	}
	if err := validateReap(t, req.Reap); err != nil {
		return 0, err
	}
	if req.AddRef && t != idxPull {
		return 0, fmt.Errorf("%s:%s: add_ref on a %s lock: only a pull's skip can record a reference: %w", req.Type, req.ResourceID, req.Type, api.ErrInvalidArgument)
	}
	if req.RequestID == "" {
		req.RequestID = newID()
	}
	return t, validateID("request_id", req.RequestID)
}

func validateUnlock(req *api.UnlockRequest) (typeIndex, error) {
	t, err := validateKey(req.Type, req.ResourceID)
	if err != nil {
		return 0, err
	}
	if len(req.Error) > api.MaxErrorLen {
		req.Error = req.Error[:api.MaxErrorLen]
	}
	return t, validateID("lease_id", req.LeaseID)
}

// validateReap accepts no reap mode (a node's own request) or, on a
// delete only, one of the known ones. Anything else is refused: an
// unknown mode (say a newer client's, during a rolling upgrade) must
// never be read as one that ignores other nodes' references.
func validateReap(t typeIndex, m api.ReapMode) error {
	if m == "" {
		return nil
	}
	if t != idxDelete {
		return fmt.Errorf("reap %q on a %s lock: only a delete may be the reaper's: %w", m, typeNames[t], api.ErrInvalidArgument)
	}
	switch m {
	case api.ReapOrphan, api.ReapDangling:
		return nil
	}
	return fmt.Errorf("reap %q: must be empty (a node's own delete), %q or %q: %w", m, api.ReapOrphan, api.ReapDangling, api.ErrInvalidArgument)
}

// errUnknownReap is what a switch on a reap mode answers for a mode
// validateReap would have refused: never the permissive branch.
func errUnknownReap(id string, m api.ReapMode) error {
	return fmt.Errorf("delete:%s: unknown reap mode %q: %w", id, m, api.ErrInvalidArgument)
}
