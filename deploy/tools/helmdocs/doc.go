// Command helmdocs writes the table of a Helm chart's values into its
// README.md, from the comments of values.yaml, or checks that the table
// there is up to date.
//
//	helmdocs [-check] CHARTDIR
//
// The comment right above a key is its description ("# -- " or "# ");
// every value needs one. A map whose keys have comments gets one row per
// key; any other value is one row, its default as JSON. The table goes
// between the lines <!-- values:begin --> and <!-- values:end --> of
// CHARTDIR/README.md.
package main
