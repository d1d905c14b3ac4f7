package lockserver

import "context"

// An admin caller (docs/design.md §9): the HTTP layer, which
// authenticates callers, marks a request's context with AsAdmin when it
// comes from the admin identity; the Coordinator then lets it do what
// only designated nodes may (take the reaper's lock, reap.go).

type adminKey struct{}

// AsAdmin returns ctx marked as an admin's request.
func AsAdmin(ctx context.Context) context.Context { return context.WithValue(ctx, adminKey{}, true) }

// IsAdmin reports whether ctx was marked by AsAdmin.
func IsAdmin(ctx context.Context) bool {
	admin, _ := ctx.Value(adminKey{}).(bool)
	return admin
}
