package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A read-only Open writes nothing into the dir: not kvindex.lock, not kvindex.pid, not Pebble's
// LOCK. It checks that the dir holds a kvindex store before touching anything, reads the lock
// files, and takes a shared lock on each that exists (so it reads a read-only copy, and a server
// cannot start on the dir while it reads). Another process holding either lock makes it fail
// with ErrLocked.

// pebbleLockName is Pebble's own lock file inside the data dir.
const pebbleLockName = "LOCK"

// LockState says how a read-only Open found the dir's locks.
type LockState int

const (
	// LockOwned: a read-write Open holds the exclusive lock (kvindex.lock).
	LockOwned LockState = iota
	// LockShared: no other process held the dir; the read-only Open holds a shared lock on its
	// lock files until Close (a server cannot start on the dir meanwhile).
	LockShared
	// LockNoFile: the dir has no kvindex.lock (a Pebble checkpoint or a copy of Pebble's files):
	// no kvindex process uses it as its data dir.
	LockNoFile
)

// String is the sentence inspect prints.
func (l LockState) String() string {
	switch l {
	case LockOwned:
		return "held by this process (read-write)"
	case LockShared:
		return "not held by another process (read with a shared lock)"
	case LockNoFile:
		return "no kvindex.lock (a checkpoint or a copy): no kvindex process uses this dir"
	}
	return fmt.Sprintf("LockState(%d)", int(l))
}

// LockState reports how the store holds its dir.
func (s *Store) LockState() LockState { return s.lockState }

// rwHeld names the dirs this process has open read-write. A read-only Open in the same process
// must not even open their lock files: closing any descriptor of a file releases every POSIX
// lock the process holds on it, the read-write Store's included.
var rwHeld sync.Map // lockKey → struct{}

type lockKey struct {
	fs   vfs.FS
	path string
}

func keyOf(f vfs.FS, dir string) lockKey {
	if abs, err := filepath.Abs(dir); err == nil && f == vfs.Default {
		dir = abs
	}
	return lockKey{fs: f, path: filepath.Clean(dir)}
}

// CheckStore returns nil when dir holds a kvindex store (a Pebble DB), else an error wrapping
// ErrNoData (missing or empty dir, or a kvindex.lock alone) or ErrNotDataDir (other files). It
// writes nothing: offline commands call it before any open that could create files.
func CheckStore(f vfs.FS, dir string) error {
	names, err := f.List(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("open %s: %w: the dir does not exist", dir, ErrNoData)
		}
		return fmt.Errorf("open %s: listing the dir: %w", dir, permErr(err))
	}
	if len(names) == 0 {
		return fmt.Errorf("open %s: %w: the dir is empty", dir, ErrNoData)
	}
	desc, err := pebble.Peek(dir, f)
	if err != nil {
		return mapPebbleErr(fmt.Sprintf("open %s: read the Pebble store's description", dir), permErr(err))
	}
	if desc.Exists {
		return nil
	}
	for _, n := range names {
		if n == LockFileName {
			return fmt.Errorf("open %s: %w: it holds kvindex.lock but no Pebble store (never written, or its files were removed)", dir, ErrNoData)
		}
	}
	return fmt.Errorf("open %s: %w: it holds %s (e.g. %s) but no kvindex store", dir, ErrNotDataDir, files(len(names)), names[0])
}

// files is "1 file", "2 files".
func files(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}

// takeSharedLock takes a shared lock on each of the dir's lock files that exists.
func (s *Store) takeSharedLock() error {
	if _, held := rwHeld.Load(keyOf(s.fs, s.dir)); held {
		return s.lockedErr(errors.New("opened read-write by this process"))
	}
	s.lockState = LockNoFile
	var closers multiCloser
	for _, name := range []string{LockFileName, pebbleLockName} {
		c, err := sharedLock(s.fs, s.fs.PathJoin(s.dir, name))
		if err != nil {
			_ = closers.Close()
			if errors.Is(err, errHeld) {
				return s.lockedErr(err)
			}
			return fmt.Errorf("open %s: reading the lock file %s: %w", s.dir, name, permErr(err))
		}
		if c != nil {
			closers = append(closers, c)
			if name == LockFileName {
				s.lockState = LockShared
			}
		}
	}
	s.lock = closers
	return nil
}

// lockedErr is ErrLocked naming the owner's pid (from kvindex.pid, advisory).
func (s *Store) lockedErr(cause error) error {
	pid := "?"
	if b, rerr := readSmallFile(s.fs, s.fs.PathJoin(s.dir, PIDFileName)); rerr == nil && strings.TrimSpace(string(b)) != "" {
		pid = strings.TrimSpace(string(b)) + "?"
	}
	return fmt.Errorf("%w: data dir %s is in use by another kvindex process (pid %s): %v", ErrLocked, s.dir, pid, cause)
}

// errHeld: another process holds the lock.
var errHeld = errors.New("the lock is held")

// sharedLock takes a shared lock on path, opened read-only; nil, nil when there is no such file.
// On the OS file system it is an open-file-description read lock (Linux), which conflicts with
// the exclusive POSIX locks of a server; on another FS (MemFS) it is that FS's exclusive lock.
func sharedLock(f vfs.FS, path string) (io.Closer, error) {
	file, err := f.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	if fd := file.Fd(); fd != vfs.InvalidFd {
		ok, err := readLockFd(fd)
		if ok || err != nil {
			if err != nil {
				_ = file.Close()
				return nil, err
			}
			return file, nil
		}
	}
	_ = file.Close()
	l, err := f.Lock(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errHeld, err)
	}
	return l, nil
}

// multiCloser closes each, keeping the first error.
type multiCloser []io.Closer

func (m multiCloser) Close() error {
	var first error
	for _, c := range m {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// noLockFS is the FS a read-only Open gives Pebble: its Lock takes nothing (the Store holds the
// shared locks), so Pebble does not create LOCK in a dir it only reads.
type noLockFS struct{ vfs.FS }

func (noLockFS) Lock(string) (io.Closer, error) { return io.NopCloser(nil), nil }
