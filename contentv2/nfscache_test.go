package contentv2

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNegativeLookupCache: the shared root's mount is read from
// /proc/self/mountinfo lines as the kernel writes them; an NFS mount
// without lookupcache=positive or none is warned about, naming the option;
// any other mount, or a root on another filesystem than the NFS mount, is
// not.
func TestNegativeLookupCache(t *testing.T) {
	const (
		root = "25 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw"
		// The NFS client's defaults: lookupcache=all, which it does not show.
		nfsAll  = "41 25 0:45 / /mnt/shared rw,relatime shared:30 - nfs4 fs1:/export rw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.2,local_lock=none,addr=10.0.0.1"
		nfsPos  = "42 25 0:46 / /mnt/pos rw,relatime - nfs fs1:/export rw,vers=3,lookupcache=pos,addr=10.0.0.1"
		nfsNone = "43 25 0:47 / /mnt/with\\040space rw - nfs4 fs1:/e rw,vers=4.1,lookupcache=none"
	)
	e, err := ParseMountinfoLine(nfsAll)
	require.NoError(t, err)
	require.Equal(t, "/mnt/shared", e.MountPoint)
	require.Equal(t, "nfs4", e.FSType)
	require.Equal(t, "fs1:/export", e.Source)
	require.Contains(t, e.SuperOptions, "vers=4.2")
	require.Contains(t, e.MountOptions, "relatime")
	w := e.NegativeLookupCache()
	require.Contains(t, w, "lookupcache=positive")
	require.Contains(t, w, "fs1:/export at /mnt/shared")

	for _, line := range []string{nfsPos, nfsNone, root} {
		e, err := ParseMountinfoLine(line)
		require.NoError(t, err)
		require.Empty(t, e.NegativeLookupCache(), line)
	}
	e, err = ParseMountinfoLine(nfsNone)
	require.NoError(t, err)
	require.Equal(t, "/mnt/with space", e.MountPoint)

	for _, bad := range []string{"", "25 1 259:1 / / rw", "25 1 259:1 / / rw shared:1 ext4 /dev/root rw", "25 1 259:1 / / rw -"} {
		_, err := ParseMountinfoLine(bad)
		require.Error(t, err, "%q", bad)
	}

	info := root + "\n" + nfsAll + "\n" + nfsPos + "\n"
	for path, want := range map[string]string{
		"/mnt/shared/containerd-content": "/mnt/shared",
		"/mnt/shared":                    "/mnt/shared",
		"/mnt/sharedother":               "/",
		"/mnt/pos/x":                     "/mnt/pos",
		"/var/lib":                       "/",
	} {
		e, ok := mountOf(info, path)
		require.True(t, ok, path)
		require.Equal(t, want, e.MountPoint, path)
	}
	// A mount over another at the same point: the later one is in use.
	e, ok := mountOf(info+"44 41 0:48 / /mnt/shared rw - nfs4 fs2:/other rw,lookupcache=pos\n", "/mnt/shared/x")
	require.True(t, ok)
	require.Equal(t, "fs2:/other", e.Source)
	require.Empty(t, e.NegativeLookupCache())

	// The root of this test is on no NFS mount.
	w, err = RootMountWarning(t.TempDir())
	require.NoError(t, err)
	require.Empty(t, w)
}
