// Package version says which build of sharedcontent is running: the
// version and revision the Makefile stamps with -ldflags -X (from `git
// describe --always --dirty` and `git rev-parse HEAD`), else what the Go
// toolchain recorded in the binary (runtime/debug.ReadBuildInfo: a module
// version for `go install ...@v1.2.3`, the VCS revision for a build in a
// git checkout), else "dev" and "unknown". Every binary prints it for
// --version; the coordinator and the node daemon report it on /healthz
// (the Header) and as the metric sharedcontent_build_info.
package version
