package freezefs

import "github.com/hanwen/go-fuse/v2/fuse"

// frozen passes every request that can block on a real filesystem through
// the freeze gate. Files are opened for direct I/O, so that no read is
// answered from the kernel's page cache while frozen. Forget and the releases are not gated: the kernel sends
// them without waiting, and they touch no data.
type frozen struct {
	fuse.RawFileSystem
	fs *FS
}

func (f *frozen) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Lookup(c, h, name, out)
}

func (f *frozen) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.GetAttr(c, in, out)
}

func (f *frozen) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.SetAttr(c, in, out)
}

func (f *frozen) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Mknod(c, in, name, out)
}

func (f *frozen) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Mkdir(c, in, name, out)
}

func (f *frozen) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Unlink(c, h, name)
}

func (f *frozen) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Rmdir(c, h, name)
}

func (f *frozen) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Rename(c, in, oldName, newName)
}

func (f *frozen) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Link(c, in, name, out)
}

func (f *frozen) Symlink(c <-chan struct{}, h *fuse.InHeader, to, name string, out *fuse.EntryOut) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Symlink(c, h, to, name, out)
}

func (f *frozen) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	f.fs.gate(c)
	return f.RawFileSystem.Readlink(c, h)
}

func (f *frozen) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Access(c, in)
}

func (f *frozen) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	f.fs.gate(c)
	st := f.RawFileSystem.Create(c, in, name, out)
	out.OpenFlags |= fuse.FOPEN_DIRECT_IO
	return st
}

func (f *frozen) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	f.fs.gate(c)
	st := f.RawFileSystem.Open(c, in, out)
	out.OpenFlags |= fuse.FOPEN_DIRECT_IO
	return st
}

func (f *frozen) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	f.fs.gate(c)
	return f.RawFileSystem.Read(c, in, buf)
}

func (f *frozen) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Lseek(c, in, out)
}

func (f *frozen) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	f.fs.gate(c)
	return f.RawFileSystem.Write(c, in, data)
}

func (f *frozen) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	f.fs.gate(c)
	return f.RawFileSystem.Writev(c, in, data)
}

func (f *frozen) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	f.fs.gate(c)
	return f.RawFileSystem.CopyFileRange(c, in)
}

func (f *frozen) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Flush(c, in)
}

func (f *frozen) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Fsync(c, in)
}

func (f *frozen) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Fallocate(c, in)
}

func (f *frozen) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.OpenDir(c, in, out)
}

func (f *frozen) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.ReadDir(c, in, out)
}

func (f *frozen) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.ReadDirPlus(c, in, out)
}

func (f *frozen) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.FsyncDir(c, in)
}

func (f *frozen) StatFs(c <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.StatFs(c, in, out)
}

func (f *frozen) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.Statx(c, in, out)
}

func (f *frozen) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	f.fs.gate(c)
	return f.RawFileSystem.GetXAttr(c, h, attr, dest)
}

func (f *frozen) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	f.fs.gate(c)
	return f.RawFileSystem.ListXAttr(c, h, dest)
}

func (f *frozen) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (f *frozen) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	f.fs.gate(c)
	return f.RawFileSystem.RemoveXAttr(c, h, attr)
}
