package refcount

import "fmt"

// Check returns the error Commit returns for a batch with a write that
// cannot be applied (an empty key, node or member ID, a reserved meta
// key, a resource ID outside a ReplaceNodeBuckets' buckets): one wrapping
// errdefs.ErrInvalidArgument. A Storage outside this package (the etcd
// store) checks a batch with it before it writes anything.
func (b *Batch) Check() error {
	if err := checkAll(b.writes); err != nil {
		return fmt.Errorf("refcount: commit: %w", err)
	}
	return nil
}
