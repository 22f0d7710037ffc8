//go:build unix

package offline

import (
	"os"
	"syscall"
)

// allocatedBytes is the disk space a file takes (st_blocks × 512, what du counts), or its
// apparent size when the file system does not say.
func allocatedBytes(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Blocks) * 512
	}
	return uint64(fi.Size())
}
