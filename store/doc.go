// Package store owns kvindex's data directory: it opens the single Pebble database every rank's
// log lives in, takes the directory lock, checks the on-disk format version, forwards Pebble's
// logger and events to slog, and defines the key layout every other package uses. Other packages
// never build keys by hand: they call the key helpers here (LogKey, RankLogBounds, MetaKey, ...).
//
// # Invariants
//
//   - One process owns a data dir. A read-write Open takes an exclusive lock on DIR/kvindex.lock
//     (through the vfs, so it works on the in-memory FS of the crash tests) and Pebble's own LOCK;
//     a second Open, in this process or another, fails with ErrLocked.
//   - A read-only Open writes nothing into the dir (no kvindex.lock, kvindex.pid or LOCK), so it
//     reads a read-only copy: it refuses a missing or empty dir (ErrNoData) or one without a
//     Pebble store (ErrNotDataDir) before touching it, and takes a shared lock on each lock file
//     that exists (Linux open-file-description read locks; the vfs's lock elsewhere). Readers
//     share a dir; a server holding it makes a reader fail with ErrLocked and a reader makes a
//     server's Open fail so. LockState says which case held.
//   - A read-write Open of an empty dir writes the format version record; every Open refuses a
//     dir written with a newer format (ErrFormatTooNew) or an unknown older one
//     (ErrFormatUnsupported). A format-1 dir opens read-write only (to be upgraded). A read-only Open of a dir that holds no kvindex data fails with
//     ErrNoData.
//   - A new dir is flushed right after its version record is written. Pebble creates a DB at an
//     old format and ratchets it to PebbleFormat after the first WAL exists, so that first WAL
//     has no sync offsets and mid-WAL corruption in it would read as a torn tail (measured: a
//     damaged byte silently dropped 152 synced records); the flush rotates to a WAL in the
//     pinned format.
//   - A torn tail of the newest WAL (an unfinished commit, never acknowledged under Sync) is
//     dropped by Pebble with only an info line; Open scans that WAL first and reports the torn
//     tail (warn log, Listener.TornWALTail, TornTails).
//   - Corruption reported by Pebble is marked with ErrCorruption (errors.Is works on both
//     store.ErrCorruption and Pebble's own marker).
//   - Pebble's Fatalf does not return: it logs at error level and panics with an error wrapping
//     ErrFatal. The commit path of package wal recovers that panic and fails the commit; in a
//     Pebble background goroutine it ends the process, as Pebble's default logger would.
//
// # Key layout (part of the on-disk format: never change without a new FormatVersion)
//
// Every key starts with one prefix byte. Integers are big-endian so that byte order equals
// numeric order and one rank's keys are contiguous. Format 2 (kept by formats 3 and 4, which
// changed only the log record, wal/doc.go) put the partition (the id of the rank's (model_name,
// routing_group), package partition; 0 = default) in front of the worker in every per-rank key; format 1 had no partition field (each per-rank key 4 bytes
// shorter) and is upgraded in place by wal.Open (wal/upgrade.go).
//
//	log record        'L' | partition u32 | worker_id u64 | dp_rank u32 | event_id u64  (25 bytes)
//	                  +----+-----------+--------+--------+--------+
//	                  | 4C | partition | worker | dp     | id     |
//	                  +----+-----------+--------+--------+--------+
//	                    1        4          8        4        8
//	                  id: the record's event, or (format 4) the last event of a group record
//	                  of consecutive ids (wal/doc.go)
//
//	rank snapshot     'S' | partition u32 | worker_id u64 | dp_rank u32                 (17 bytes)
//	rank metadata     'M' | partition u32 | worker_id u64 | dp_rank u32 | kind u8       (18 bytes)
//	gap ledger entry  'G' | partition u32 | worker_id u64 | dp_rank u32 | gap_seq u64   (25 bytes)
//	removal tombstone 'T' | partition u32 | worker_id u64 | dp_rank u32                 (17 bytes)
//	pending event     'P' | partition u32 | worker_id u64 | dp_rank u32 | event_id u64  (25 bytes)
//	format version    'V'                                                                 (1 byte)
//	global metadata   'K' | name bytes                                                    (1+n bytes)
//
// The value of the format version key is the version as a u32 big-endian:
//
//	+---------------------+
//	| format_version u32  |
//	+---------------------+
//
// Values of the other keys are owned by the packages that write them (wal draws its record,
// snapshot, cursor, gap and tombstone encodings in its own doc.go; global metadata values are
// encoded by whoever owns the name).
package store
