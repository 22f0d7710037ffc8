package store

import (
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// DiskBytes is the space the data dir takes on disk, as `du` counts it: every file under the
// dir (Pebble's tables, WAL and its recycled files, manifests, the lock, kvindex's own files)
// at its allocated size (st_blocks × 512 where the file system says, else the apparent size).
// The status page, /metrics, `inspect` and `compact` all print this one number.
func (s *Store) DiskBytes() uint64 { return DirBytes(s.fs, s.dir) }

// DirBytes is DiskBytes for any dir on fs (0 for one that cannot be read).
func DirBytes(fs vfs.FS, dir string) uint64 {
	names, err := fs.List(dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, name := range names {
		p := fs.PathJoin(dir, name)
		fi, err := fs.Stat(p)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			n += DirBytes(fs, p)
			continue
		}
		n += allocatedBytes(fi)
	}
	return n
}

// allocatedBytes is the disk space a file takes, or its apparent size when the file system does
// not say (MemFS, non-unix).
func allocatedBytes(fi os.FileInfo) uint64 {
	if b, ok := blocks(fi); ok {
		return b
	}
	return uint64(max(fi.Size(), 0))
}
