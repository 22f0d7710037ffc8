package store

import (
	"fmt"
	"os"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Usage is a data dir's size on disk, as du counts it.
type Usage struct {
	Bytes    uint64 // every file and directory under the dir, the dir included
	WALBytes uint64 // Pebble's WAL files (*.log)
	WALFiles int
}

// DiskBytes is the space the data dir takes on disk as `du` counts it (DirUsage): the one store
// size the status page, /metrics, `inspect` and `compact` print.
func (s *Store) DiskBytes() uint64 {
	u, _ := DirUsage(s.fs, s.dir)
	return u.Bytes
}

// DirUsage is dir's size on disk as du counts it (`du -s --block-size=1`): the blocks allocated
// to every file and directory under dir, dir included, where the file system reports them
// (Pebble preallocates WAL files, so their apparent size understates what they take), else the
// apparent size. The owner's pid file (PIDFileName) is left out: it exists only while the dir is
// held (by inspect itself while it measures), so the number is what du prints for the dir at
// rest.
func DirUsage(fs vfs.FS, dir string) (Usage, error) {
	var u Usage
	fi, err := fs.Stat(dir)
	if err != nil {
		return u, fmt.Errorf("%s: %w: %w", dir, ErrNoData, err)
	}
	u.Bytes += allocatedBytes(fi)
	if err := u.walk(fs, dir, true); err != nil {
		return u, err
	}
	return u, nil
}

func (u *Usage) walk(fs vfs.FS, dir string, top bool) error {
	names, err := fs.List(dir)
	if err != nil {
		if top {
			return fmt.Errorf("listing %s: %w: %w", dir, ErrNoData, err)
		}
		return nil // removed meanwhile
	}
	for _, n := range names {
		if top && n == PIDFileName {
			continue
		}
		path := fs.PathJoin(dir, n)
		fi, err := fs.Stat(path)
		if err != nil {
			continue // removed meanwhile
		}
		u.Bytes += allocatedBytes(fi)
		switch {
		case fi.IsDir():
			if err := u.walk(fs, path, false); err != nil {
				return err
			}
		case top && strings.HasSuffix(n, ".log"):
			u.WALBytes += allocatedBytes(fi)
			u.WALFiles++
		}
	}
	return nil
}

// allocatedBytes is the disk space a file takes, or its apparent size when the file system does
// not say (MemFS, non-unix).
func allocatedBytes(fi os.FileInfo) uint64 {
	if b, ok := blocks(fi); ok {
		return b
	}
	return uint64(max(fi.Size(), 0))
}
