package lockserver

import "context"

// commitWaitKey is the context key of WithCommitWait's function.
type commitWaitKey struct{}

// WithCommitWait returns a ctx under which a call that has ordered its
// write and waits for the commit it shares with other calls (a reference
// add, docs/design.md §10.2) calls f first, once: the HTTP side then gives
// back the slot of new work the call held, since waiting costs no CPU and
// the more adds wait together, the fuller the commit (§10, "Unlocks
// first").
func WithCommitWait(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, commitWaitKey{}, f)
}

// commitWait calls ctx's WithCommitWait function, if any.
func commitWait(ctx context.Context) {
	if f, ok := ctx.Value(commitWaitKey{}).(func()); ok && f != nil {
		f()
	}
}
