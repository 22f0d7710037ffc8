package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// FormatVersion is the on-disk format this binary writes and reads (key layout here, record,
// snapshot and metadata encodings in wal). Bump it for any incompatible change; older binaries
// refuse a newer dir with ErrFormatTooNew.
const FormatVersion uint32 = 5

// FormatV4 is the format before one durable record per worker (engine: the worker table, package
// worker; format 4 kept a worker's recovery URL, door kind, group kinds, lease and Dynamo
// registrations under five metadata prefixes). A read-write Open accepts it and the engine
// converts the metadata to records and sets the version to 5 in one synced batch
// (worker.Upgrade); the offline tools read a format-4 dir as it is.
const FormatV4 uint32 = 4

// FormatV3 is the format before group log records (wal: one record per event, version 1; format
// 4 adds version-2 records of consecutive events). Its dirs are valid format-4 dirs: a
// read-write Open accepts it and wal.Open sets the version record to 4 (wal/upgrade.go; the
// engine then takes it to 5), so a
// format-3 binary then refuses the dir; a read-only open reads it as it is.
const FormatV3 uint32 = 3

// FormatV2 is the format before KV-cache groups in log records (wal's record flag bit 2). Its
// dirs are valid format-4 dirs, upgraded as format-3 ones are.
const FormatV2 uint32 = 2

// FormatV1 is the format before partitions (rank keys without the partition). A read-write Open
// accepts it and wal.Open upgrades it in place (wal/upgrade.go); read-only opens refuse it.
const FormatV1 uint32 = 1

// PebbleFormat is the Pebble format major version kvindex creates and pins (it includes WAL sync
// chunks, so a torn WAL tail is told apart from corruption). Never the default, never
// FormatNewest.
const PebbleFormat = pebble.FormatValueSeparation

// File names inside the data dir (besides Pebble's own files).
const (
	LockFileName = "kvindex.lock" // held exclusively by the owning process
	PIDFileName  = "kvindex.pid"  // the owner's pid, for the ErrLocked message (advisory)
)

// Errors returned by Open and the Store methods. Check them with errors.Is.
var (
	// ErrLocked: another kvindex process (or another Open in this process) holds the data dir.
	ErrLocked = errors.New("data dir is locked")
	// ErrFormatTooNew: the dir was written by a newer kvindex format than this binary knows.
	ErrFormatTooNew = errors.New("data dir format is newer than this binary supports")
	// ErrFormatUnsupported: the dir's format version record is unknown, malformed or missing
	// although the dir holds data.
	ErrFormatUnsupported = errors.New("data dir format is not supported")
	// ErrNoData: a read-only Open found no kvindex data in the dir.
	ErrNoData = errors.New("no kvindex data in dir")
	// ErrNotDataDir: the dir holds files but is not a kvindex data dir (read-write: no
	// kvindex.lock; read-only: no Pebble store); a read-write Open refuses it unless
	// Options.Force, so a mistyped --data-dir does not fill an unrelated dir.
	ErrNotDataDir = errors.New("not a kvindex data dir")
	// ErrPermission: the dir (or its lock file) cannot be created or written by this user. It
	// also matches fs.ErrPermission.
	ErrPermission = errors.New("permission denied")
	// ErrCorruption marks corruption found in the store: Pebble's (a corrupt WAL, sstable or
	// MANIFEST) and, through wal, corrupt records and snapshots.
	ErrCorruption = errors.New("corruption")
	// ErrFatal is the panic value (wrapped) of Pebble's Fatalf: the DB hit an error it cannot
	// continue from (for example a failed WAL sync). The Store must be closed and reopened.
	ErrFatal = errors.New("pebble: fatal error")
)

// Options configure Open. The zero value is valid: every field has a documented default.
type Options struct {
	// FS is the filesystem; default vfs.Default. Tests pass vfs.NewCrashableMem() or an errorfs.
	FS vfs.FS
	// ReadOnly opens for offline inspection: it writes nothing into the dir (no lock, pid or
	// Pebble file), so it reads a read-only copy. The dir must hold a kvindex store (else
	// ErrNoData, or ErrNotDataDir for a dir of other files). It takes a shared lock on the dir's
	// lock files: another process holding the dir makes it fail with ErrLocked (LockState).
	ReadOnly bool
	// Logger receives Pebble's log lines and events; default slog.Default().
	Logger *slog.Logger
	// CacheSize is the block cache size in bytes; default 64 MiB.
	CacheSize int64
	// MemTableSize is Pebble's memtable size in bytes; default 64 MiB.
	MemTableSize uint64
	// Listener receives store events (optional callbacks); default none.
	Listener Listener
	// Tune, when set, is applied to the Pebble options last (tests and experiments only).
	Tune func(*pebble.Options)
	// Force opens a non-empty dir that is not a kvindex data dir (else ErrNotDataDir).
	Force bool
}

// Listener holds optional callbacks for store events. Tests use them to observe recovery.
type Listener struct {
	// TornWALTail is called during Open when the newest WAL ended in a partially written record
	// that Pebble drops (the writes of an unfinished, unacknowledged commit).
	TornWALTail func(TornTail)
	// Corruption is called when Pebble reports corrupt data.
	Corruption func(path string, err error)
	// BackgroundError is called for errors in Pebble's flushes and compactions.
	BackgroundError func(err error)
}

// TornTail describes a WAL whose tail was dropped on open.
type TornTail struct {
	WAL    string // the WAL's physical file
	Offset int64  // where the dropped record begins (as reported by Pebble's WAL reader)
	Err    error  // the reader's error (record.ErrUnexpectedEOF)
}

const (
	defaultCacheSize    = 64 << 20
	defaultMemTableSize = 64 << 20
)

// Store is an open data dir. Its methods are safe for concurrent use.
type Store struct {
	dir      string
	fs       vfs.FS
	log      *slog.Logger
	db       *pebble.DB
	lock     io.Closer
	cache    interface{ Unref() }
	readOnly bool
	// lockState is how the dir is held (LockOwned read-write; read-only: LockShared or LockNoFile).
	lockState LockState
	version   uint32
	torn      []TornTail
	fatal     *atomic.Bool // set by the Pebble logger's Fatalf
	// memLimit and cacheSize are the memory bounds of the open DB (MemoryLimits).
	memLimit, cacheSize int64
}

// Open opens (creating when needed and not ReadOnly) the data dir.
func Open(dir string, opts Options) (*Store, error) {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = defaultCacheSize
	}
	if opts.MemTableSize == 0 {
		opts.MemTableSize = defaultMemTableSize
	}
	s := &Store{dir: dir, fs: opts.FS, log: opts.Logger, readOnly: opts.ReadOnly, fatal: new(atomic.Bool)}

	if opts.ReadOnly {
		if err := CheckStore(opts.FS, dir); err != nil {
			return nil, err
		}
	} else {
		if !opts.Force {
			if err := checkDataDir(opts.FS, dir); err != nil {
				return nil, err
			}
		}
		if err := opts.FS.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("open %s: create dir: %w", dir, permErr(err))
		}
	}
	lock := s.takeLock
	if opts.ReadOnly {
		lock = s.takeSharedLock
	}
	if err := lock(); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = s.unlock()
		}
	}()

	torn, err := scanWALTail(opts.FS, dir)
	if err != nil {
		s.log.Warn("store: could not pre-scan the WAL", "dir", dir, "err", err)
	}
	for _, t := range torn {
		// Routine after a crash or kill -9: one line says so, the reader's error goes to debug.
		s.log.Info("store: the log ended in a torn write, as after any crash: the unfinished commit was never acknowledged and is dropped; every acknowledged event is replayed",
			"wal", t.WAL, "offset", t.Offset)
		s.log.Debug("store: torn WAL tail", "wal", t.WAL, "offset", t.Offset, "err", oneLineErr(t.Err))
		if opts.Listener.TornWALTail != nil {
			opts.Listener.TornWALTail(t)
		}
	}
	s.torn = torn

	cache := pebble.NewCache(opts.CacheSize)
	s.cache = cache
	defer cache.Unref() // the DB holds its own reference
	pebbleFS := opts.FS
	if opts.ReadOnly {
		pebbleFS = noLockFS{opts.FS}
	}
	po := &pebble.Options{
		FS:                    pebbleFS,
		ReadOnly:              opts.ReadOnly,
		ErrorIfNotExists:      opts.ReadOnly,
		FormatMajorVersion:    PebbleFormat,
		Cache:                 cache,
		MemTableSize:          opts.MemTableSize,
		L0StopWritesThreshold: 24,
		LBaseMaxBytes:         256 << 20,
		FlushDelayDeleteRange: 10 * time.Second,
		Logger:                pebbleLogger{log: opts.Logger, fatal: s.fatal},
		EventListener:         s.eventListener(opts.Listener),
	}
	po.CompactionConcurrencyRange = func() (int, int) { return 1, 2 }
	if opts.Tune != nil {
		opts.Tune(po)
	}
	stop := int64(po.MemTableStopWritesThreshold)
	if stop <= 0 {
		stop = 2 // Pebble's default
	}
	s.memLimit, s.cacheSize = int64(po.MemTableSize)*stop, opts.CacheSize
	db, err := pebble.Open(dir, po)
	if err != nil {
		var pe *fs.PathError
		if !errors.As(err, &pe) && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES)) {
			// Pebble's own LOCK is held (by a tool that bypassed kvindex.lock); a *PathError
			// is a file Pebble could not create (permissions), not a held lock.
			return nil, fmt.Errorf("%w: data dir %s is in use by another process (Pebble LOCK): %w", ErrLocked, dir, err)
		}
		return nil, mapPebbleErr(fmt.Sprintf("open %s", dir), err)
	}
	s.db = db
	if err := s.checkVersion(); err != nil {
		_ = db.Close()
		return nil, err
	}
	ok = true
	return s, nil
}

// takeLock takes DIR/kvindex.lock and records our pid next to it.
func (s *Store) takeLock() error {
	lockPath := s.fs.PathJoin(s.dir, LockFileName)
	pidPath := s.fs.PathJoin(s.dir, PIDFileName)
	l, err := s.fs.Lock(lockPath)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			// Creating the lock file failed (a *PathError; a held lock is a bare errno from
			// fcntl): the dir is not writable, not locked.
			return fmt.Errorf("open %s: creating the lock file: %w", s.dir, permErr(err))
		}
		return s.lockedErr(err)
	}
	s.lock = l
	s.lockState = LockOwned
	rwHeld.Store(keyOf(s.fs, s.dir), struct{}{})
	// Best effort: the pid only serves the ErrLocked message of a contender.
	if f, err := s.fs.Create(pidPath, vfs.WriteCategoryUnspecified); err == nil {
		_, _ = f.Write([]byte(strconv.Itoa(os.Getpid()) + "\n"))
		_ = f.Close()
	}
	return nil
}

// checkDataDir refuses an existing, non-empty dir without kvindex.lock (every dir kvindex ever
// opened has one): it is somebody else's dir. A missing or empty dir is fine.
func checkDataDir(f vfs.FS, dir string) error {
	names, err := f.List(dir)
	if err != nil {
		return nil // missing (created next) or unreadable (MkdirAll or the lock reports it)
	}
	if len(names) == 0 {
		return nil
	}
	for _, n := range names {
		if n == LockFileName {
			return nil
		}
	}
	// The caller names its own way past this (serve's --force, Options.Force).
	return fmt.Errorf("open %s: %w: it holds %s (e.g. %s) and no kvindex.lock; pick an empty or new dir",
		dir, ErrNotDataDir, files(len(names)), names[0])
}

// permErr marks a permission failure with ErrPermission (the OS error stays wrapped).
func permErr(err error) error {
	if errors.Is(err, fs.ErrPermission) && !errors.Is(err, ErrPermission) {
		return fmt.Errorf("%w: %w", ErrPermission, err)
	}
	return err
}

func readSmallFile(f vfs.FS, path string) ([]byte, error) {
	file, err := f.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return io.ReadAll(io.LimitReader(file, 64))
}

// checkVersion reads the format version record, writing it into an empty read-write dir.
func (s *Store) checkVersion() error {
	v, closer, err := s.db.Get([]byte(VersionKey))
	switch {
	case err == nil:
		defer closer.Close()
		if len(v) != 4 {
			return fmt.Errorf("open %s: %w: version record has %d bytes, want 4", s.dir, ErrFormatUnsupported, len(v))
		}
		s.version = binary.BigEndian.Uint32(v)
		switch {
		case s.version > FormatVersion:
			return fmt.Errorf("open %s: %w: dir format %d, this binary supports up to %d (upgrade kvindex)",
				s.dir, ErrFormatTooNew, s.version, FormatVersion)
		case s.version == FormatV1 && s.readOnly:
			return fmt.Errorf("open %s: %w: dir format 1 must be upgraded to %d first: start `kvindex serve` on it once (or run `kvindex compact`), which upgrades it in place",
				s.dir, ErrFormatUnsupported, FormatVersion)
		case s.version != FormatVersion && s.version != FormatV1 && s.version != FormatV2 && s.version != FormatV3 && s.version != FormatV4:
			return fmt.Errorf("open %s: %w: dir format %d is not readable by this binary (format %d)",
				s.dir, ErrFormatUnsupported, s.version, FormatVersion)
		}
		return nil
	case errors.Is(err, pebble.ErrNotFound):
	default:
		return mapPebbleErr(fmt.Sprintf("open %s: read format version", s.dir), err)
	}
	// No version record: only an empty dir may be initialised.
	empty, err := s.isEmpty()
	if err != nil {
		return err
	}
	if !empty {
		return fmt.Errorf("open %s: %w: the dir holds keys but no format version record", s.dir, ErrFormatUnsupported)
	}
	if s.readOnly {
		return fmt.Errorf("open %s: %w", s.dir, ErrNoData)
	}
	val := binary.BigEndian.AppendUint32(nil, FormatVersion)
	if err := s.db.Set([]byte(VersionKey), val, pebble.Sync); err != nil {
		return mapPebbleErr(fmt.Sprintf("open %s: write format version", s.dir), err)
	}
	// Pebble creates a new DB at an old format and ratchets it to PebbleFormat after the first
	// WAL was created, so that WAL lacks sync offsets (mid-WAL corruption in it would read as a
	// torn tail). A flush rotates to a WAL written in the pinned format.
	if err := s.db.Flush(); err != nil {
		return mapPebbleErr(fmt.Sprintf("open %s: rotate the first WAL", s.dir), err)
	}
	s.version = FormatVersion
	return nil
}

func (s *Store) isEmpty() (bool, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return false, mapPebbleErr("open: scan", err)
	}
	has := it.First()
	if err := it.Close(); err != nil {
		return false, mapPebbleErr("open: scan", err)
	}
	return !has, nil
}

// DB returns the Pebble database. Callers build keys with this package's helpers.
func (s *Store) DB() *pebble.DB { return s.db }

// Dir returns the data dir path.
func (s *Store) Dir() string { return s.dir }

// FS returns the filesystem the store runs on.
func (s *Store) FS() vfs.FS { return s.fs }

// ReadOnly reports whether the store was opened read-only.
func (s *Store) ReadOnly() bool { return s.readOnly }

// Version returns the dir's format version.
func (s *Store) Version() uint32 { return s.version }

// SetVersion writes the dir's format version record (synced); the upgrade calls it last.
func (s *Store) SetVersion(v uint32) error {
	if err := s.db.Set([]byte(VersionKey), binary.BigEndian.AppendUint32(nil, v), pebble.Sync); err != nil {
		return mapPebbleErr(fmt.Sprintf("%s: write format version", s.dir), err)
	}
	s.version = v
	return nil
}

// CommitVersion applies b with the format version record set to v, synced, in one atomic batch:
// an in-place upgrade whose rewrite and version change land together (a crash leaves the old
// format or the new one, never a mix).
func (s *Store) CommitVersion(b *pebble.Batch, v uint32) error {
	if err := b.Set([]byte(VersionKey), binary.BigEndian.AppendUint32(nil, v), nil); err != nil {
		return mapPebbleErr(fmt.Sprintf("%s: write format version", s.dir), err)
	}
	if err := s.db.Apply(b, pebble.Sync); err != nil {
		return mapPebbleErr(fmt.Sprintf("%s: upgrade to format %d", s.dir, v), err)
	}
	s.version = v
	return nil
}

// Logger returns the store's logger.
func (s *Store) Logger() *slog.Logger { return s.log }

// TornTails returns the torn WAL tails found when the store was opened (normally none).
func (s *Store) TornTails() []TornTail { return s.torn }

// DiskUsage returns the bytes Pebble's files use on disk.
func (s *Store) DiskUsage() uint64 { return s.db.Metrics().DiskSpaceUsage() }

// MemoryLimits returns the bounds of Pebble's two large memory users: the memtables (MemTableSize
// × Pebble's MemTableStopWritesThreshold, 2: writes stall beyond it until a flush ends) and the
// block cache (CacheSize).
func (s *Store) MemoryLimits() (memtables, blockCache int64) { return s.memLimit, s.cacheSize }

// Metrics returns Pebble's metrics (for /metrics and inspect).
func (s *Store) Metrics() *pebble.Metrics { return s.db.Metrics() }

// Checkpoint writes a consistent copy of the store into dest (a new dir) with hard links where
// possible, after flushing the WAL: an online backup that does not stall writes.
func (s *Store) Checkpoint(dest string) error {
	if err := s.db.Checkpoint(dest, pebble.WithFlushedWAL()); err != nil {
		return mapPebbleErr(fmt.Sprintf("checkpoint %s to %s", s.dir, dest), err)
	}
	return nil
}

// CompactAll flushes the memtable and compacts the whole keyspace, so space freed by
// DeleteRange returns to the filesystem (offline `kvindex compact`).
func (s *Store) CompactAll(ctx context.Context) error {
	if err := s.db.Flush(); err != nil {
		return mapPebbleErr(fmt.Sprintf("compact %s: flush", s.dir), err)
	}
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		return mapPebbleErr(fmt.Sprintf("compact %s", s.dir), err)
	}
	return nil
}

// FatalCloseWait bounds how long Close waits for Pebble after a fatal error.
const FatalCloseWait = 2 * time.Second

// Close closes Pebble and releases the lock. After a fatal Pebble error (Fatalf panicked, maybe
// with one of Pebble's locks held) Close waits at most FatalCloseWait for Pebble, then abandons
// it (its goroutines are left to the process's exit), releases the lock and returns an error
// wrapping ErrFatal: what was acknowledged is on disk, and the next Open recovers from the WAL.
func (s *Store) Close() (err error) {
	if s.db == nil {
		return nil
	}
	if s.fatal.Load() {
		// Pebble's Fatalf may have panicked with one of Pebble's mutexes held: try to close,
		// but do not wait forever (a process that stops must stop); the WAL is the truth.
		db := s.db
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() { _ = recover() }()
			_ = db.Close()
		}()
		select {
		case <-done:
		case <-time.After(FatalCloseWait):
			s.log.Error("store: Pebble did not close after a fatal error; abandoning it", "dir", s.dir)
		}
		s.db = nil
		if lerr := s.unlock(); lerr != nil {
			return fmt.Errorf("close %s: %w (unlock: %v)", s.dir, ErrFatal, lerr)
		}
		return fmt.Errorf("close %s: %w: closed after a fatal error", s.dir, ErrFatal)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("close %s: %w", s.dir, panicErr(r))
		}
		s.db = nil
		if lerr := s.unlock(); lerr != nil && err == nil {
			err = fmt.Errorf("close %s: unlock: %w", s.dir, lerr)
		}
	}()
	if cerr := s.db.Close(); cerr != nil {
		return mapPebbleErr(fmt.Sprintf("close %s", s.dir), cerr)
	}
	return nil
}

// unlock removes the pid file (it names the owner only while the lock is held) and releases the
// lock; a read-only store only releases its shared locks.
func (s *Store) unlock() error {
	if s.readOnly {
		return s.lock.Close() // the pid file is the owner's, if any
	}
	rwHeld.Delete(keyOf(s.fs, s.dir))
	if err := s.fs.Remove(s.fs.PathJoin(s.dir, PIDFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("store: removing the pid file", "dir", s.dir, "err", err)
	}
	return s.lock.Close()
}

// MapError wraps a Pebble error with context, marking corruption with ErrCorruption.
func MapError(context string, err error) error { return mapPebbleErr(context, err) }

func mapPebbleErr(context string, err error) error {
	if err == nil {
		return nil
	}
	if pebble.IsCorruptionError(err) {
		return fmt.Errorf("%s: %w: %w", context, ErrCorruption, err)
	}
	return fmt.Errorf("%s: %w", context, err)
}

// panicErr turns a recovered panic value into an error wrapping ErrFatal.
func panicErr(r any) error {
	if e, ok := r.(error); ok {
		if errors.Is(e, ErrFatal) {
			return e
		}
		return fmt.Errorf("%w: panic: %w", ErrFatal, e)
	}
	return fmt.Errorf("%w: panic: %v", ErrFatal, r)
}

// PanicError converts a value recovered from a panic inside a Pebble call into an error wrapping
// ErrFatal (and ErrCorruption when the cause is corruption).
func PanicError(r any) error {
	err := panicErr(r)
	if pebble.IsCorruptionError(err) {
		return fmt.Errorf("%w: %w", ErrCorruption, err)
	}
	return err
}
