// Command mkimage builds the sharedcontent OCI image without a Docker
// engine and without downloading a base image, and pushes it.
//
//	mkimage build -bin DIR -out FILE.tar -name NAME -version V -revision SHA -source URL -epoch SECONDS
//	mkimage push -in FILE.tar REF
//
// build reads the static binaries from DIR/<os>_<arch>/ for every platform
// (linux/amd64 and linux/arm64 unless -platforms says otherwise) and writes
// one OCI image index, one image per platform, as an OCI layout tarball that
// `ctr images import` accepts. Every time in it is -epoch (the commit time,
// SOURCE_DATE_EPOCH), every file is owned by 0:0 and written in one order,
// so two builds of one commit give one digest.
//
// The image's default user is 65532:65532 and its entrypoint the
// coordinator (sharedcontent-lockserver), which needs neither root nor a
// host path. The node daemon (containerd-sharedcontent) runs from the same
// image as root with its command overridden: it serves containerd's socket
// from a host path and mounts snapshots (docs/helm.md).
package main
