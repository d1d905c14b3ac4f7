// Package cli gives the sharedcontent daemons one way to be configured:
// flags, each also an environment variable SHAREDCONTENT_<FLAG_IN_CAPS>,
// and an optional TOML file whose keys are the flag names. Precedence, from
// lowest: built-in default, TOML file, environment, command line. A
// renamed flag keeps its old name as a deprecated alias (Alias), in all
// three places. SetLogLevel sets up the log, without the warning
// containerd's local store logs on file systems without fs-verity.
package cli
