package refcount

// SetIndexChunk sets how many references one transaction of the per-node
// index's build holds, and returns the function that restores it.
func SetIndexChunk(n int) (restore func()) {
	old := indexChunk
	indexChunk = n
	return func() { indexChunk = old }
}
