package main

// The wake-up levers (docs/design.md §10.6) were each
// measured alone by hand, by scale runs with and without the lever; their
// figures have a block of their own in BENCHMARKS.md, between these
// markers, which no run writes and every run keeps.
const (
	leversBegin = "<!-- begin levers: measured by hand (docs/design.md §10.6); every run keeps it -->\n"
	leversEnd   = "<!-- end levers -->\n"
)
