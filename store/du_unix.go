//go:build unix

package store

import (
	"os"
	"syscall"
)

func blocks(fi os.FileInfo) (uint64, bool) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Blocks) * 512, true
	}
	return 0, false
}
