// Package freezefs mounts a FUSE passthrough of a directory that a test
// can freeze: while frozen, every filesystem operation on the mount blocks
// until Thaw, as on a shared filesystem whose server stops answering (an
// NFS hard mount, a GlusterFS volume that lost its bricks). It needs root
// and /dev/fuse; Mount skips the test when FUSE is not available.
package freezefs
