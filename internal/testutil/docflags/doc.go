// Package docflags reads the flag tables of a Markdown page
// (docs/operations.md "Flags and environment"), for the tests that hold
// every flag of a command documented there.
package docflags
