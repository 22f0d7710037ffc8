// Package store owns kvindex's data directory: it opens the single Pebble database every rank's
// log lives in, takes the directory lock, checks the on-disk format version, forwards Pebble's
// logger and events to slog, and defines the key layout every other package uses. Other packages
// never build keys by hand: they call the key helpers here (LogKey, RankLogBounds, MetaKey, ...).
//
// # Invariants
//
//   - One process owns a data dir. Open takes an exclusive lock on DIR/kvindex.lock (through the
//     vfs, so it works on the in-memory FS of the crash tests) in both read-write and read-only
//     mode; a second Open, in this process or another, fails with ErrLocked. Pebble's own LOCK
//     file is taken as well in read-write mode.
//   - A read-write Open of an empty dir writes the format version record; every Open refuses a
//     dir written with a newer format (ErrFormatTooNew) or an unknown older one
//     (ErrFormatUnsupported). A read-only Open of a dir that holds no kvindex data fails with
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
// numeric order and one rank's keys are contiguous.
//
//	log record        'L' | worker_id u64 BE | dp_rank u32 BE | event_id u64 BE      (21 bytes)
//	                  +----+--------+--------+--------+
//	                  | 4C | worker | dp     | id     |
//	                  +----+--------+--------+--------+
//	                    1      8        4        8
//
//	rank snapshot     'S' | worker_id u64 BE | dp_rank u32 BE                        (13 bytes)
//	rank metadata     'M' | worker_id u64 BE | dp_rank u32 BE | kind u8            (14 bytes)
//	gap ledger entry  'G' | worker_id u64 BE | dp_rank u32 BE | gap_seq u64 BE     (21 bytes)
//	removal tombstone 'T' | worker_id u64 BE | dp_rank u32 BE                        (13 bytes)
//	format version    'V'                                                            (1 byte)
//	global metadata   'K' | name bytes                                               (1+n bytes)
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
