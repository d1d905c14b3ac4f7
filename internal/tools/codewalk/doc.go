// Command codewalk measures how a package reads: for each entry point
// (Type.Method or Func), the functions of the package it reaches, depth
// first in call order, the files and parts they are in, and how often the
// walk comes back to a file or part it had left; then the arrows between
// files (file A uses something file B declares) and between parts.
//
//	go run ./internal/tools/codewalk -dir ./lockserver \
//	    -parts "$(cat lockserver/parts.txt)" Coordinator.Lock Coordinator.AddRef
//
// A call through an interface ends the walk there: a seam between parts
// is an interface (docs/design.md §3.11). Files that no -parts entry names
// are shared and count for no part.
package main
