//go:build !linux

package store

// readLockFd: without open-file-description locks the caller falls back to the FS's own lock.
func readLockFd(uintptr) (bool, error) { return false, nil }
