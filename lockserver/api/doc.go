// Package api defines the JSON wire types of the sharedcontent coordinator's
// HTTP API (docs/design.md §3). It has no dependencies so that clients in any module can
// share it without pulling in the server.
package api
