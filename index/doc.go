// Package index is kvindex's in-memory KV-block index: a radix tree of block positions shared by
// every rank, stored as runs (a chain's blocks once, contiguously), per-rank block lookups,
// scoring (FindMatches) and dumps (Dynamo-compatible).
//
// # Model
//
// A position is a path of tokens hashes (local block hashes) from the root. Each rank
// (worker_id, dp_rank) has a lookup block_hash → position. A rank holds a position while at
// least one of its block hashes maps to it.
//
//	root ─┬─ 101 {1/0, 2/0} ─── 102 {1/0, 2/0} ─┬─ 103 {1/0}
//	      │                                     └─ 204 {2/0}
//	      └─ 110 {3/0}
//
// Decisions beyond Dynamo's semantics, and the invariants the tests check:
//
//   - Stored: a block whose hash equals the event's parent hash, or the block before it, makes the
//     event invalid_block; this is checked before the parent lookup and before any mutation. A
//     block hash the rank already holds at another position moves to the new one.
//   - Removed/Cleared: the rank leaves the position. A position is kept while any rank holds it
//     or a run forks below it; the positions past a run's last held or forked offset are cut at
//     once, and an emptied run is unlinked (and its parent cut in turn). NodeCount (positions)
//     returns to 0 when every block is removed. A rank's blocks below a position it no longer
//     holds (a mid-chain removal) stay held: they count in tree_size, never in a score, and
//     count again if the rank re-stores the missing block at that position.
//   - A rank becomes known with its first successful Stored and stays known (even empty, after a
//     Cleared) until RemoveRank/RemoveWorker. Removed/Cleared of an unknown rank change nothing.
//   - Score: the number of leading query blocks whose positions the rank all holds — ranks are
//     intersected along the query path, so score == the model's held prefix, and the bound
//     reachable ≤ score ≤ held holds. With earlyExit the walk stops when one rank is left.
//   - DumpRank emits the blocks whose ancestors the rank all holds; stranded blocks (above) are
//     not expressible as Stored events and are left out. Replay reproduces every score.
//   - RankBuilder (bulk.go, runs_bulk.go) rebuilds an empty rank from its events on private
//     state with the semantics above, then lays only its final positions into the tree: the
//     restart replay of a log full of churn. Its result equals Apply event by event
//     (TestRankBuilderAgainstModel, TestRunsRankBuilderAgainstModel).
//
// # Layout: runs (runs.go)
//
// A run is a chain of positions stored once: its (tokens hash, block hash) pairs in one
// contiguous array, its parent position, and who holds what as spans of offsets over interned
// holder sets. A position is (run id, offset); the root is run 0, which has no pairs.
//
//	run header (runChain, 80 B, in one slice of runs indexed by run id)
//	  pairs   ──► ┌──────────────┬──────────────┬─────┐   16 B a position, contiguous; grown in
//	              │ tok0 │ hash0 │ tok1 │ hash1 │ ... │   place by a quarter (8 at least)
//	              └──────────────┴──────────────┴─────┘
//	  spans   ──► ┌───────┬─────┬─────┬─────┐             12 B a span: sorted, disjoint, maximal
//	              │ start │ end │ set │ ... │             offset ranges [start, end) over one set
//	              └───────┴─────┴─────┴─────┘
//	  kidOffs ──► offsets with a child run (uint32 each)
//	  parent      rpos = run id << 16 | offset
//	child map     (parent rpos, first tokens hash) → run id     one Go map entry per fork
//	holder set    set id: setSingle | rank id for one holder (no allocation); else an interned
//	              sorted []uint32 of rank ids, one id per distinct set, refcounted by its spans
//	rank lookup   8-byte slots  ┌──────────┬──────────┬───────────┐  linear probing from
//	                            │ tag (24) │ run (24) │ offset(16)│  tag·size/2^24, 2/3 to 4/5
//	                            └──────────┴──────────┴───────────┘  full; a hit is checked
//	                            against the pairs' block hash; other hashes in a side map
//
// Invariants (the tree's audit checks them after every step of the runs tests):
//
//   - A run's positions never move and a run never splits: a divergence at offset o hangs a
//     child run under (run, o), keyed by its first tokens hash; a Stored past a run's last
//     position appends to it. Offsets are 16 bits: a run stops at 65,535 positions and the next
//     is a child. The walk follows a run while the tokens agree and probes the child map only at
//     an offset in kidOffs.
//   - A rank holds a position iff its id is in the set of the span covering it; a rank's block
//     hashes beyond the first at one position are counted in its extra map, and it leaves the
//     position with its last hash there. Adding or removing a rank over an offset range splits
//     the spans it cuts (at most into three) and merges equal neighbours; a span's set is never
//     empty. Partial removal is exact: blocks below a position a rank no longer holds stay held
//     (spans), count in its blocks, and never in a score.
//   - A run ends at its last held or forked offset; an empty run is unlinked and its id reused.
//     Removing every block leaves no run.
//   - A rank's lookup names only positions the rank holds; a block hash that is not the column
//     of its position (another rank stored that position first under another hash) is kept in
//     the rank's side map.
//
// # Ranks
//
// Ranks are dense uint32 ids, never reused: a removed rank that comes back gets a fresh id. The
// Index's registry (the rank table, below) and the tree's (runRank by rank and by id: lookup,
// extra map, block count, eviction state) are kept in step: every rank the Index knows has a
// runRank of its id (RegisterRanks and Reserve make one), and RemoveRank drops both. Removing
// or clearing a rank takes its id out of every span of each run it touches (one pass over the
// run's spans) and trims those runs; the tree forgets the id before the rank table does, so a
// reader never gets an id its table cannot place. DumpRank and RankHashes read the rank's
// entries under the read lock and call back without it. Lock order: the tree's lock, then the
// registry's.
//
// id → rank is an immutable table swapped with an atomic.Pointer when a rank is added or
// removed. The table also orders the live ranks by (worker id, dp rank), which is how
// FindMatches lays out its answer without comparing: the ranks of ids below a base by ordinal
// (byOrd, and ord: id → ordinal), and from 8,192 ranks on the ranks registered since (at most
// about √ranks of them) in a sorted tail of their own, merged into byOrd and ord when it is full.
// So a registration copies the tail, not the whole order: a fleet of 163,840 ranks registering
// one by one costs 2.5 GB of allocation and 5 s in all, against 270 GB and 7 min 43 s when every
// registration rebuilt the order. What an answer needs of a rank is in the table's dense arrays:
// byOrd and the tail, each live rank's (worker id, dp rank, id); sizes, every rank's block count
// by id, in 64-rank chunks that successive tables share and that never move (the rank's writer
// stores its count there once per event, and readers load it atomically).
//
// # Concurrency
//
// One sync.RWMutex per tree (SMG's choice for its keyspaces): an event holds the write side for
// its whole application, a query the read side for its walk. A reader therefore sees the state
// between two events, never a part of one (TestRunsConcurrentReaders checks every answer against
// the states that existed while it ran). For a given rank at most one goroutine at a time calls
// the writer methods (Apply, ClearRank, RemoveRank, ReplaceRank, Reserve, EvictLeaves, DumpRank,
// RankHashes: the rank's lane); writers of different ranks serialize on the lock. RemoveWorker
// requires that no writer runs on the worker's ranks. Readers (FindMatches, FindMatchesInto,
// FindMatchesPath, Ranks, RankBlocks, NodeCount, Blocks, Counts, MemoryBytes) run on any
// goroutine at any time. A RankBuilder's Commit holds the write lock 4,096 positions at a time
// (runs_bulk.go), so readers may see part of a rank being built, never a position it will not
// hold.
//
// Scores: the walk keeps the ranks still matching (ascending ids), intersects them with a
// span's set only where the set changes (a whole span of an unchanged set costs nothing), and
// keeps the ranks that left at each depth as one group, so the ranks of one score are one group
// and no per-rank score is stored. Groups are laid out deepest first, each in ordinal order
// (bitmap of ordinals, or a sort of a few; a group's tail ranks, its highest ids, are merged in
// from the back), sweeping ord and sizes in id order and byOrd in ordinal order. Before it
// probes a large lookup (256 KiB and more), a writer loads the home slots of all of an event's
// hashes (runLookup.touch), so that their cache misses overlap.
//
// # Memory
//
// MemoryBytes (runs_memory.go) adds up byte counters the tree's writers keep as they change its
// shapes, read with atomic loads (no lock, no walk): every run's pairs, spans and fork offsets
// and the run headers, at the Go allocator's size classes; the interned sets; each rank's lookup
// slots, record, store order and evicted set; the Go maps (child map, set keys, ranks, the
// lookups' side entries) from their entry counts at their peak (a Go map does not shrink); and
// the Index's record of each live rank. A writer that changes a shape without its counter fails
// the tree's audit. It reads 0.98–1.00 of the live heap on the ×8 trace and on SMG's pinned and
// fragmented workloads (BenchmarkRunsMemoryBytes, TestRunsMemoryBytesTracksHeap).
//
// What one (rank, block) entry costs on the ×8 trace (1.18 entries per position; see
// docs/BENCHMARKS.md for the measured split): the pairs, 16 B per position (13.6 B per entry);
// the rank lookup, 8 B per slot at 2/3–4/5 full (about 11.5 B); the run headers (80 B per run,
// about 5 B); spans, fork offsets, the child map and interned sets (about 4 B).
//
// # Eviction
//
// With Options.Evictable (a memory bound: lanes/evict.go decides when and how much), each rank
// keeps the block hashes it newly stored in that order (8 B each, in MemoryBytes) and
// EvictLeaves(r, n) (evict.go, runs_evict.go) removes n of its blocks: the least recently
// first-stored block still held, followed down along the positions the rank holds, is cut from
// that chain's end up, a leaf first. An eviction makes the rank leave a position as a Removed
// would, so scores
// after it never exceed the scores before it (an under-count, never an over-count); it is no
// event (not in Counts). A rank remembers what it evicted (at most its live blocks + 256 hashes):
// a later Removed of an evicted block is not block_not_found, and a Stored whose parent was
// evicted is evicted at once (status ok, its blocks remembered as evicted). Cleared and removal
// forget the evicted set; re-storing an evicted block holds it again. An evicted rank gives back
// room: its store order is compacted, and its lookup shrinks to 2/3 full once under 2/5.
//
// The order, evicted set and counters are the rank's (runRank.ev), under the tree's write lock.
// "Followed down" reads: through the next offsets of the position's run, and from the last
// position of a full run (65,535 positions) into the child run that continues it; a run forked
// mid-chain is another chain, evicted in its own turn. The positions of one run go in one span
// update and one trim, from the chain's end up.
//
// # RankBuilder
//
// The builder (runs_bulk.go) keeps its own compact state — a position per path its
// events reached (24 B; the parent+1 of a chain needs no table entry, only forks do) and its
// block hashes (16 B slots) — and drops the positions neither held nor above a held one once
// they double. Commit walks the rank's final chains from the root, depth first and first child
// first, so that a chain lands as appends (its run made with room for the whole chain) or as
// steps along existing runs, and adds the rank to the spans of each run touched in one pass over
// them (a range at a time); then it builds the rank's lookup, sized once, off the lock. It holds
// the write lock for 4,096 positions at a time and lets go only right after a position the rank
// holds, with its spans in place: every position made is held or above a held one, so another
// writer's trim never cuts one whose chain has yet to be laid. A reader may see part of the rank
// (never a position it will not hold) until Commit returns.
package index
