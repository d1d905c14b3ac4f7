package refcount

// SetIndexChunk sets how many references one transaction of the per-node
// index's build holds, and returns the function that restores it.
func SetIndexChunk(n int) (restore func()) {
	old := indexChunk
	indexChunk = n
	return func() { indexChunk = old }
}

// ReadTxns returns how many read transactions s's file has started.
func ReadTxns(s *BoltStorage) int { return s.file.db.Stats().TxN }

// SetSliceRefs sets the bound a big replace is cut by (sliceRefs), and
// returns the function that restores it.
func SetSliceRefs(n int) (restore func()) {
	old := sliceRefs
	sliceRefs = n
	return func() { sliceRefs = old }
}

// SetWalkChunk sets about how many references one read transaction of
// WalkSets reads, and returns the function that restores it.
func SetWalkChunk(n int) (restore func()) {
	old := walkChunk
	walkChunk = n
	return func() { walkChunk = old }
}
