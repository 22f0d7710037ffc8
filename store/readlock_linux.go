package store

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// readLockFd takes an open-file-description read lock on the whole file fd: it conflicts with
// another process's write lock (a server's kvindex.lock) and, unlike a classic POSIX lock, is
// not released when the process closes another descriptor of the file. ok is false when the
// kernel lacks OFD locks (the caller falls back to the FS's own lock).
func readLockFd(fd uintptr) (ok bool, err error) {
	spec := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart}
	err = unix.FcntlFlock(fd, unix.F_OFD_SETLK, &spec)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES):
		return false, fmt.Errorf("%w: %v", errHeld, err)
	case errors.Is(err, unix.EINVAL):
		return false, nil
	}
	return false, err
}
