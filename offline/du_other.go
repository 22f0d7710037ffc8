//go:build !unix

package offline

import "os"

// allocatedBytes is the file's apparent size (no block counts on this platform).
func allocatedBytes(fi os.FileInfo) uint64 { return uint64(fi.Size()) }
