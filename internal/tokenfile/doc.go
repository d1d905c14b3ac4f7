// Package tokenfile reads bearer tokens from files, for the coordinator
// and its clients alike.
package tokenfile
