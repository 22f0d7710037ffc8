// Package offline holds the logic of kvindex's offline tools — `kvindex compact`, `export`,
// `inspect` and `verify` — as functions that tests call directly and that cmd/kvindex wraps in
// thin urfave/cli commands. It is a package of its own because none of the
// existing ones fits: store, wal, index and lanes are the building blocks these tools combine,
// server is the online service, and the CLI package must stay a shell.
//
// Every function takes a context (cancellation stops it between ranks or every few thousand
// records; a cancelled compact leaves the dir consistent), an io.Writer for its output and an
// options struct. None of them runs while a server holds the data dir: store.Open takes the dir
// lock in every mode (shared when read-only), so each returns an error wrapping store.ErrLocked
// instead.
//
// # Invariants
//
//   - export, inspect and verify open the store read-only (store.Options.ReadOnly): they never
//     write, not even to drop a corrupt snapshot (the server does that on its next start), nor a
//     lock file: they read a read-only copy, and leave a missing, empty or foreign dir as it was
//     (store.ErrNoData, store.ErrNotDataDir). compact checks the same (store.CheckStore) before
//     its read-write open, so it never initialises a store where there was none.
//   - compact only writes through recovery.Fold (one synced, atomic Pebble batch per rank: the new
//     snapshot, its id, the log cut and the DeleteRange of the folded prefix; or, under a newer
//     checkpoint, the cut and the DeleteRange alone) and Pebble's own
//     compaction. Killed at any moment, the dir opens and rebuilds the same tree and cursors:
//     each rank is either folded or not. A rank whose snapshot is corrupt makes compact refuse
//     before it changes anything (folding would bake the loss into a new snapshot).
//
// # Export ids (decided here)
//
// `export --what events` writes each rank's retained log with its original ids. When the rank
// has a snapshot at boundary B (every id ≤ B was folded into it) and the export starts at or
// below B, the snapshot's n Stored events come first, numbered so that they end exactly at B:
//
//	snapshot events          log events (original ids)
//	B-n+1, ..., B-1, B   |   B+1, B+2, ..., last
//
// They cannot collide with the log (whose ids are all > B), and replayed into an empty server
// they form one contiguous run per rank, so the server's cursor rules apply every event (no gap
// reset, nothing stale) and the cursor ends at the original last id: the worker's next live event
// continues the stream. When the snapshot has more events than ids below its boundary
// (n > B+1, possible for a small B since a dump splits chains at branches), the snapshot takes
// ids 0..n-1 and every log event id of that rank is shifted by n-1-B to stay contiguous; the
// shift is reported (ExportedRank.Shift, and on stderr by the CLI). `--what dump` writes the
// rebuilt tree instead, synthetic ids from 0 per rank (index.DumpRank), like GET /v1/dump.
//
// # Partitions
//
// Every command knows the partitions (model_name, routing_group) of the dir, read from their
// records (partition.Open): verify checks the ranks of every partition and names a rank outside
// the default one with its partition ("rank 21/0 (llama:default): ..."); inspect lists each
// partition with its block size and ranks; compact folds the ranks of every partition; export
// carries the partition in partition lines (partition.AppendLine, see Export): fed back as it is,
// it restores every partition with its block size.
//
// # Store size
//
// inspect's size and compact's before/after are one number: the bytes the data dir takes on
// disk as du counts them (diskUsage: allocated blocks of every file and directory, Pebble's
// preallocated WAL included), not Pebble's estimate of its own files.
//
// # What verify can and cannot compare
//
// Retention (recovery.Fold) writes a snapshot and deletes the prefix it folds in one batch, and
// the cut ('M'|rank|'x') says so: verify reports any log record below the cut as a problem. An
// online checkpoint (lanes) is a snapshot newer than the cut: the log between them is retained
// and is not a problem. verify checks every snapshot on its own: it decodes, every event applies
// cleanly to an empty rank, and dumping that rank gives the snapshot back (a snapshot is a dump,
// a fixed point of dump→replay). When the log was never cut, the snapshot must also equal the
// replay of the log up to its id; otherwise whether it equals the deleted events cannot be
// known. compact folds a log retained under a checkpoint by trimming it (the snapshot stays).
package offline
