// Package wal owns the per-rank event logs: one logical log per rank (worker_id, dp_rank), all
// in the single Pebble DB of package store so every lane shares one commit pipeline and
// concurrent synced commits group into one fsync. It also owns each rank's cursor, gap ledger,
// snapshot and removal tombstone, and global metadata values under names other packages choose.
//
// # Invariants
//
//   - A Commit is acknowledged only when Pebble's Commit returned: with Sync the batch is fsynced,
//     with NoSync it is in the memtable (a crash, even SIGKILL, may lose the acknowledged tail).
//     Start + Wait is a Commit in two steps: Start applies the batch in call order without
//     waiting for the sync (Pebble's ApplyNoSyncWait), Wait returns once it is durable; batches
//     started one after the other land in that order while sharing fsyncs.
//     A batch is atomic: after a crash all of it or none of it is there.
//   - A rank's metadata (cursor, gaps) goes in the same batch as the events it describes.
//   - Readers may see a commit before it is durable: never feed the in-memory index by tailing
//     the log; feed it after Commit returns.
//   - Retention deletes with DeleteRange from the previous cut point, never point deletes; the
//     cut ('M'|rank|'x') says every log id below it was folded into the snapshot.
//   - The snapshot is at or after the cut minus one, never before, and never moves backwards. It
//     may be newer (an online checkpoint, WriteCheckpoint): the log between the cut and the
//     snapshot's id is retained (range answers) but not replayed. A checkpoint is written
//     without fsync and deletes nothing; Pebble's WAL is ordered, so one that survives a crash
//     has the events it covers with it, and one lost leaves the older snapshot and the whole log.
//     Retention under a newer checkpoint only cuts (TrimLog).
//   - Every value carries a CRC-32C (Castagnoli) over the rank (and event id) its key names and
//     the value bytes before it, so a damaged value or one moved under another key is caught;
//     such a value is reported with an error wrapping ErrCorruption. A bad snapshot cannot be
//     rebuilt below the cut: the log prefix it folded was deleted (from the cut on, the log has it). The replay (recovery.ReplayRank) reports it;
//     the lanes drop it, record the ids it covered as lost and mark the rank degraded.
//   - A rank's pending events ('P'|rank|event_id, a log record value) are live events buffered
//     during a recovery: durable because they were acknowledged, deleted once applied or
//     recorded lost. They are not part of the log (the log holds what the tree holds).
//   - The live path opens an iterator per read and closes it (an open iterator pins memtables
//     and sstables). A Reader (Log.NewReader) is the exception, for the restart replay only, when
//     no writes run: one goroutine reads many ranks in key order through one long-lived iterator
//     per key prefix, repositioned with SeekGE per rank (no per-rank iterator set-up or index
//     block re-reads), and closes them when done. The Log's read methods are a Reader's code
//     with per-read iterators, so both answer alike.
//   - The cursor's epoch counts the publisher restarts (new epochs) the rank has seen.
//   - A fatal Pebble error (a failed WAL write or sync) fails the Commit that hit it and every
//     later write with ErrFailed: reopen the store. What was acknowledged before is durable.
//
// # Log record value (key: store.LogKey = 'L' | partition u32 BE | worker u64 BE | dp u32 BE | event_id u64 BE)
//
// Part of the on-disk format (store.FormatVersion). Hashes are fixed 8 bytes little-endian
// (they are uniformly random: varints would grow them); counts are uvarints.
//
//	+---------+------+------+-------+--------------------+-------------------+---------------+-----------+---------+--------+
//	| ver = 1 | kind | tier | flags | parent_hash u64 LE | source_seq u64 LE | group         | n uvarint | n items | crc32c |
//	|   u8    |  u8  |  u8  |  u8   | (iff flags&1)      | (iff flags&2)     | (iff flags&4) |           |         | u32 LE |
//	+---------+------+------+-------+--------------------+-------------------+---------------+-----------+---------+--------+
//	kind:  1 stored, 2 removed, 3 cleared (event.Kind)
//	tier:  0 device, 1 host_pinned, 2 disk, 3 external (event.Tier)
//	flags: bit 0 = has parent (Stored only); bit 1 = has source_seq (the seq of the vLLM batch
//	       that carried the event, event.RouterEvent.SourceSeq); bit 2 = has group (Stored and
//	       Removed only: the engine's KV-cache group, event.RouterEvent.Group); other bits must be 0
//	group: group_idx uvarint | kind u8 (event.GroupKind: 0 unset, 1 full_attention,
//	       2 mla_attention, 3 sink_full_attention, 4 sliding_window, 5 sliding_window_mla,
//	       6 mamba, 7 chunked_local_attention, 8 encoder_only_attention, 9 cross_attention,
//	       255 other) | sliding_window uvarint (tokens, 0 none) | block_size uvarint (0 unknown).
//	       A record without it (every record written before groups existed) has no group
//	       metadata: its rank's one main group.
//	items: stored:  n × ( block_hash u64 LE | tokens_hash u64 LE )     16 bytes each
//	       removed: n × ( block_hash u64 LE )                            8 bytes each
//	       cleared: n = 0, no items
//	crc32c over: partition u32 BE | worker u64 BE | dp u32 BE | event_id u64 BE | every value byte before the crc
//
// A Stored event with 8 blocks and a parent is 1+3+8+1+128+4 = 145 bytes.
//
// # Group record value (format 4; key: store.LogKey with the id of the group's LAST event)
//
// A commit's run of consecutive events of one rank (ids first..last, k = last-first+1 ≥ 2) is
// one record: the same per-event bodies back to back, behind a count. A single event is still
// written as the version-1 record above: a version-1 record is a group of one.
//
//	+---------+-----------+--------------------------------+--------------------------------+-----+--------+
//	| ver = 2 | k uvarint | body of event first            | body of event first+1          | ... | crc32c |
//	|   u8    | (≥ 2)     | kind | tier | flags | ... | items| kind | tier | flags | ... | items|     | u32 LE |
//	+---------+-----------+--------------------------------+--------------------------------+-----+--------+
//	body:  a version-1 record without its version byte and crc (self-delimiting: its flags and
//	       count give its length), for ids last-k+1, ..., last in order
//	crc32c over: partition u32 BE | worker u64 BE | dp u32 BE | last event_id u64 BE | every value byte before the crc
//	       (the key's rank and last id, and k: every event id of the group is covered)
//
// Eight Stored events of 8 blocks with parents in one commit: 1+1+8×140+4 = 1,126 bytes under
// one 25-byte key, against 8 × (145 + 25) = 1,360 bytes under eight keys in format 3; what
// matters more is one Pebble memtable insert per (rank, commit) instead of one per event.
//
// Why keyed by the last id: a reader asking for ids ≥ from seeks to LogKey(rank, from) and lands
// on the record that holds from (records of a rank hold disjoint ids, rising with their keys),
// so Range, Last and the DeleteRange of retention keep their key arithmetic; First reads the
// first record's count.
//
// Invariants of group records:
//   - A Batch groups per rank: events of a rank appended with consecutive ids become one record
//     at commit, whatever other ranks' events lie between them; an id that does not continue the
//     run closes it (a gap, or an id below it) and starts the next record. ResetRank and
//     RemoveRank drop the rank's open run (the batch deletes its log anyway) so appends after
//     them start a new one.
//   - Ids are per event everywhere above the record: Range (from and limit count events; a range
//     may start or stop inside a group), First and Last, range answers, retention cuts, export
//     and verify (which counts events as its "log records").
//   - A retention cut may fall inside a group (its first id below the new cut, its last at or
//     above it): the DeleteRange from the previous cut does not reach it (its key is its last
//     id), so the same synced batch rewrites it under the same key without the events below the
//     cut (a smaller group, or a version-1 record when one event is left), re-sealed. No log id
//     below the cut remains, as in format 3. A group that fails its checksum is left as it is.
//   - A damaged group loses its events together: it is one value and one checksum.
//   - Pending events ('P' keys, below) are not grouped: they stay one version-1 record each
//     (a recovery buffers few, and each is deleted on its own id).
//
// # Snapshot value (key: 'S' | worker | dp)
//
//	+---------+--------------------+-----------+--------------------------------------+--------+
//	| ver = 1 | last_event_id u64  | n uvarint | n × ( event_id uvarint               | crc32c |
//	|   u8    | LE                 |           |       | body_len uvarint | body )    | u32 LE |
//	+---------+--------------------+-----------+--------------------------------------+--------+
//	body: a log record value without its version byte and crc (kind | tier | flags | ...)
//	crc32c over: partition u32 BE | worker u64 BE | dp u32 BE | every value byte before the crc
//
// # Per-rank metadata and tombstone values
//
// All share one frame; the crc covers partition u32 BE | worker u64 BE | dp u32 BE | the bytes
// before it:
//
//	+---------+---------+--------+
//	| ver = 1 | payload | crc32c |
//	+---------+---------+--------+
//
//	cursor       'M'|rank|'c'  payload: last_event_id u64 LE | flags u8 (bit 0 degraded) | epoch u32 LE
//	snapshot id  'M'|rank|'s'  payload: u64 LE, the LastEventID of the rank's snapshot
//	log cut      'M'|rank|'x'  payload: u64 LE, every log id below it is deleted
//	gap          'G'|rank|seq  payload: from u64 LE | to u64 LE | outcome u8 | at i64 LE (unix ns)
//	tombstone    'T'|rank      payload: removed-at i64 LE (unix ns)
//
// Pending event (key 'P'|rank|event_id): the log record value above, its crc over the same
// partition | worker | dp | event_id bytes.
//
// # Format 1 → 2 (upgrade.go)
//
// Format 1 had no partition in the rank keys or in the crcs. wal.Open upgrades a format-1 dir in
// place: every per-rank key moves to partition 0, each value keeping its bytes but its crc
// (re-computed over the new rank bytes when the old crc checks; a damaged value keeps its bad
// crc), in atomic synced batches of 4,096 keys, the version record set to the current format
// last. A crash mid-upgrade leaves version 1 and a mix of old and new keys (told apart by
// length): the next open finishes it.
//
// # Format 2 → 3
//
// Format 3 added the record flag bit 2 (a KV-cache group after source_seq). A format-2 dir holds
// no such record, so it is a valid format-3 dir: a read-write wal.Open only sets the version
// record (to 4 now) (a format-2 binary then refuses the dir instead of reading group records as
// corrupt); a read-only open reads a format-2 dir as it is. testdata/format2 is a dir of the last
// format-2 binary (TestUpgradeFormat2InPlace).
//
// # Format 3 → 4
//
// Format 4 added the version-2 group record. A format-3 (or format-2) dir holds only version-1
// records, which read as groups of one, so it is a valid format-4 dir: a read-write wal.Open only
// sets the version record to 4, so a format-3 binary then refuses the dir (store.ErrFormatTooNew)
// instead of reading group records as corrupt; a read-only open reads a format-3 dir as it is.
// Nothing is rewritten: old records stay one per event until retention deletes them.
// testdata/format3 is a dir of the last format-3 binary (TestUpgradeFormat3InPlace,
// lanes.TestFormat3DirReplaysAsWritten).
//
// # Format 4 → 5
//
// Format 5 keeps what kvindex knows about a worker as one record, "worker/<worker_id>" (package
// worker), where format 4 had five prefixes: source/<worker_id> (recovery URL), wsource/<worker_id>
// (door kind), groupkinds/<worker_id> (an event source's indexed group kinds), lease/<worker_id>
// (deadline | ttl | implied, binary) and register/<instance_id>/<dp_rank> (a Dynamo /register,
// JSON). Log records are unchanged. This package's own upgrades stop at format 4 (it does not
// interpret metadata); the engine's Open converts a format-4 dir (worker.Upgrade): the records
// set and the old entries deleted in one synced batch with the version record, so a crash leaves
// format 4 or format 5, never a mix (worker.TestUpgradeFormat4Crash fails the upgrade at each of
// its WAL writes). The offline tools read a format-4 dir as it is (worker.Load).
// testdata/format4workers is a dir of the last format-4 binary with every per-worker fact.
//
// Gap sequence numbers rise per rank (1, 2, ...); a gap outcome is 0 lost, 1 recovered,
// 2 pending. Global metadata ('K'|name) values are opaque here.
//
// # Global metadata names
//
// Every name other packages keep under 'K', by prefix (one place to look before adding one; a
// name must not start with another's prefix):
//
//	name                                     owner                   value
//	partition/<id>                           partition               the partition's record (JSON: names, block size)
//	partition-next                           partition               the next partition id once one was dropped (decimal)
//	worker/<worker_id>                       worker (engine/workers) the worker's record (JSON): its partition, door kind,
//	                                                                 recovery URL, group kinds, lease, Dynamo registrations
//	peer/<url>                               server (dynamo.go)      a registered peer (empty)
//	zmqsource/<id>                           sources                 a vLLM ZMQ source added over HTTP (JSON); format 4 also
//	                                                                 kept /register's here (format 5: built from the record)
//	natssource/<id>                          sources                 a NATS source added over HTTP (JSON)
//	zmq/<id>/seq                             vllm                    a ZMQ source's seq cursor (8 bytes)
//	js/<id>/seq                              natsrc                  a JetStream source's applied stream sequence (8 bytes)
//	js/<id>/rank/<part>/<worker>/<dp>        natsrc                  the newest stream sequence applied to a rank (8 bytes)
//	nats/<id>/pub/<publisher_id>             natsrc                  a Core publisher's newest sequence (8 bytes)
package wal
