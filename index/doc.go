// Package index is kvindex's in-memory KV-block index: a radix tree of block positions shared by
// every rank, per-rank block lookups, scoring (FindMatches) and dumps (Dynamo-compatible).
//
// # Model
//
// A node is a position: the path of tokens hashes (local block hashes) from the root. Each rank
// (worker_id, dp_rank) has a lookup block_hash → node, owned by the rank's writer. A rank holds a
// node while at least one of its block hashes maps to it (holder entries count those hashes).
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
//   - Removed/Cleared: the rank leaves the node. A node is kept while any rank holds it or it has
//     children; a node neither held nor parent of anything is unlinked at once, and so are its
//     ancestors that thereby become childless and unheld. NodeCount returns to 0 when every block
//     is removed. A rank's blocks below a position it no longer holds (a mid-chain removal) stay
//     held: they count in tree_size, never in a score, and count again if the rank re-stores the
//     missing block at that position.
//   - A rank becomes known with its first successful Stored and stays known (even empty, after a
//     Cleared) until RemoveRank/RemoveWorker. Removed/Cleared of an unknown rank change nothing.
//   - Score: the number of leading query blocks whose positions the rank all holds — ranks are
//     intersected along the query path, so score == the model's held prefix, and the bound
//     reachable ≤ score ≤ held holds. With earlyExit the walk stops when one rank is left.
//   - DumpRank emits the blocks whose ancestors the rank all holds; stranded blocks (above) are
//     not expressible as Stored events and are left out. Replay reproduces every score.
//   - RankBuilder (bulk.go) rebuilds an empty rank from its events on private maps with the
//     semantics above, then links only its final positions (and their ancestors, pinned in
//     their kids count until their child is linked) into the tree: the restart replay of a log
//     full of churn. Its result equals Apply event by event (TestRankBuilderAgainstModel).
//
// # Concurrency
//
// Writers: for a given rank at most one goroutine at a time calls Apply, ClearRank, RemoveRank,
// ReplaceRank and DumpRank (the rank's lane). Different ranks are written concurrently.
// RemoveWorker requires that no writer runs on the worker's ranks. Readers (FindMatches,
// FindMatchesInto, Ranks, RankBlocks, NodeCount, Blocks, Counts) run on any goroutine at any time.
//
// Invariants that make this safe:
//
//   - Every linked node is reachable by its key (parent, tokens hash): either it is its
//     parent's first child (the parent's first slot, set by compare-and-swap when empty at the
//     node's creation, cleared when that node is unlinked) or it is in the child table, striped
//     over 256 shards by key. A shard's mutex serializes the writers of the nodes whose keys
//     hash to it: table slots, first slots holding them, holders and the dead mark. Readers take
//     no lock: they load first slots, a shard's table, its slots and a node's holders with
//     atomic loads. A table slot goes nil → node → tombstone (→ node) and never back to nil;
//     growing publishes a new table. Writers hold one shard lock at a time. Most nodes (a
//     chain's) are first children: creating one touches no table, and a reader walking a chain
//     follows one index per block.
//   - Nodes live in a slab (slab.go): 32-byte pointer-free records in chunks that never move,
//     addressed by 32-bit indices (parent, first child, table slots, lookups), so the garbage
//     collector scans none of them. The root is index 0.
//   - A node's holders are one inline rank id, or an immutable holder set (sorted rank ids, one
//     allocation) kept in a slot of a second slab and replaced whole in it; writers order their stores so that a reader sees a node's
//     holders as before or after a change, never torn (tree.go). How many block hashes of a
//     rank map to one node is the rank's business (its writer-owned refs), not the node's.
//   - A node a rank holds is linked: only the rank's own writer removes the rank from it, and a
//     node is unlinked only when unheld and childless (kids, an atomic count of linked
//     children), checked under its shard lock. Hence a writer's parent node (held, or the root)
//     is alive while it attaches under it, and nobody else attaches under a node that nobody
//     holds. A child's unlinking decrements its parent's kids; whoever brings kids to 0
//     re-checks the parent under its shard lock.
//   - An unlinked node is marked dead (kids -1), it has no holder, and it is not linked again
//     while anyone may still reach it: a reader that reaches it (through an older table) finds
//     it unheld and stops there. Its slot (and a holder set slot given up) waits in limbo
//     until every goroutine that was reading nodes it does not hold — queries and writers'
//     events, each inside an epoch (slab.go) — has left, and only then is reused. Hence a
//     node's plain fields (tokens, hash, parent) change only when no reader can see them.
//   - A linked child counts in its parent's kids from its insertion to its unlinking, both under
//     the child's shard lock: a writer holding that lock that reads kids 0 knows the child is
//     absent without probing.
//   - Ranks are dense uint32 ids, never reused. id → rank is an immutable table swapped with an
//     atomic.Pointer when a rank is added or removed; a rank's block count is an atomic. The
//     table also orders the live ranks by (worker id, dp rank), which is how FindMatches lays
//     out its answer without comparing: the ranks of ids below a base by ordinal (byOrd, and
//     ord: id → ordinal), and from 8,192 ranks on the ranks registered since (ids from the
//     base on, at most about √ranks of them) in a sorted tail of their own, merged into byOrd
//     and ord when it is full. So a registration copies the tail, not the whole order: a fleet
//     of 163,840 ranks registering one by one costs 2.5 GB of allocation and 5 s in all,
//     against 270 GB and 7 min 43 s when every registration rebuilt the order. What an answer needs of a rank is in the table's
//     dense arrays, never behind the rank's state: byOrd and the tail, each live rank's (worker
//     id, dp rank, id); sizes, every rank's block count by id, in 64-rank chunks that
//     successive tables share and that never move (a rank's state points at its slot; its
//     writer adds to it once per event, and readers load it atomically).
//   - FindMatches keeps the ranks still matching, ascending by id, and the ranks that left at
//     each depth as one run (ascending by id), so that the ranks of one score are one run and
//     no per-rank score is stored; runs are laid out deepest first, each in ordinal order
//     (bitmap of ordinals, or a sort of a few; a run's tail ranks, its highest ids, are then
//     merged in from the back), sweeping ord and sizes in id order and byOrd
//     in ordinal order (a query whose caches went cold pays no random probe per rank).
//
// # Memory
//
// What one (rank, block) entry costs, so that changes can be weighed (BenchmarkHeapBytesPerEntry):
//
//	node          32 B   tokens, block hash (the key of its rank lookup entries), parent, first
//	                     child, holder word (inline holder or holder set slot), child count
//	holder set    4·(holders+1) B rounded up to a size class, and an 8-byte slot, only for 2
//	              holders or more
//	child table   one 8-byte slot (node index, tag) per node that is not a first child, tables
//	              between 3/8 and 3/4 full
//	rank lookup   one 6-byte slot (node index, tag) per entry whose block hash is its node's,
//	              tables at most 4/5 full, grown by half (between 8/15 and 4/5 full; 3/4 for a
//	              rank of 512 blocks); a Go map entry for any other (rare)
//
// A first-child node held by one rank thus costs about 32 + 9 B; shared by k ≥ 2 ranks, its
// share is about (32 + 8 + 4·(k+1))/k + 9 B; a node in the child table adds about 14 B. Tables do
// not shrink (a churned shard keeps its peak size until its next rebuild; a cleared rank starts
// a fresh lookup), and neither does the slab: the slots of unlinked nodes are reused by the
// next nodes made, so the slab stays at the peak node count.
//
// MemoryBytes (memory.go) turns these costs into an estimate for /metrics
// (kvindex_memory_bytes{part="index"}) from live counts only — node count and child-table sizes
// exact, lookups and holder sets estimated — so a scrape never walks the tree.
//
// # Eviction
//
// With Options.Evictable (a memory bound: lanes/evict.go decides when and how much), each rank
// keeps the block hashes it newly stored in that order (8 B each, in MemoryBytes) and
// EvictLeaves(r, n) (evict.go) removes n of its blocks: the least recently first-stored block
// still held, followed down through the first children the rank holds, is cut from that chain's
// end up, a leaf first. An eviction makes the rank leave a node as a Removed would, so scores
// after it never exceed the scores before it (an under-count, never an over-count); it is no
// event (not in Counts). A rank remembers what it evicted (at most its live blocks + 256 hashes):
// a later Removed of an evicted block is not block_not_found, and a Stored whose parent was
// evicted is evicted at once (status ok, its blocks remembered as evicted). Cleared and removal
// forget the evicted set; re-storing an evicted block holds it again. An evicted rank gives back
// room: its store order is compacted, and its lookup shrinks to 2/3 full once under 2/5.
//
// On the run layout (runs_evict.go) the same order, evicted set and counters are the rank's
// (runRank.ev), under the tree's write lock. "Followed down through the first children" reads:
// through the next offsets of the position's run (a run's continuation is the child made first
// below a position), and from the last position of a full run (65,535 positions) into the child
// run that continues it; a run forked mid-chain is another chain, evicted in its own turn. The
// positions of one run go in one span update and one trim, from the chain's end up.
//
// A reader sees each node's state as of its visit; a query racing a writer may see a mix of
// before and after, never a torn holder set.
//
// # Runs (Options.Runs, runs.go)
//
// The run layout of issue 34 lives beside the slab, selected by Options.Runs (or, for every
// Index of a process, KVINDEX_INDEX_LAYOUT=runs: how the whole test suite runs on it;
// KVINDEX_BENCH_LAYOUT=runs for the layout benchmarks, BenchmarkSMG included). It supports every
// method: Apply, FindMatches/FindMatchesInto/FindMatchesPath (early exit included), Blocks,
// NodeCount, Ranks, RankBlocks, MemoryBytes, EvictLeaves with Options.Evictable, RankBuilder
// (runs_bulk.go) and the rank operations (runs_rank.go: ClearRank, RemoveRank, RemoveWorker,
// ReplaceRank, Reserve, RegisterRanks, RankHashes, DumpRank). It was main's index for one commit
// (56e1214) and was reverted: its one lock per tree serializes writers, so in-memory ingest on
// 2 cores, the restart and the query tail under load measured worse than the slab's
// (docs/BENCHMARKS.md). What it needs to be main's: writers of different ranks in parallel.
//
//	run         pairs  []{tokens hash, block hash}   16 B a position, contiguous; grown in place
//	                                                  by a quarter (8 positions at least)
//	            spans  []{start, end, set}           12 B a span: sorted, disjoint, maximal
//	                                                  offset ranges over one interned holder set
//	            kidOffs []uint32                     the offsets that have a child run
//	            parent  (run, offset)                80 B of header in all
//	child map   (run, offset, tokens hash) → run     one Go map entry a fork
//	holder set  sorted rank ids, interned (one id per distinct set), refcounted by its spans
//	rank lookup 8-byte slots tag(24) | run(24) | offset(16), linear probing from tag·size/2^24,
//	            2/3 to 4/5 full; a hit is checked against the pairs' block hash
//
// Invariants the tests check (TestRunsAgainstModel audits them after every event):
//
//   - A position is (run, offset); a run's positions never move and a run never splits: a
//     divergence at offset o hangs a child run under (run, o), keyed by its first tokens hash;
//     a Stored past a run's last position appends to it. The walk from the root follows a run
//     while the tokens agree and probes the child map only at an offset in kidOffs.
//   - A rank holds a position iff its id is in the set of the span covering it; a rank's block
//     hashes beyond the first at one position are counted in its extra map, and it leaves the
//     position with its last hash there. Adding or removing a rank over an offset range splits
//     the spans it cuts (at most into three) and merges equal neighbours; a span's set is
//     never empty. Partial removal is exact: blocks below a position a rank no longer holds
//     stay held (spans), count in its blocks, and never in a score.
//   - A run ends at its last held or forked offset: positions past it are cut, an empty run is
//     unlinked from its parent (whose end is then recomputed) and its id reused. Removing every
//     block leaves no run.
//   - A rank's lookup names only positions the rank holds; a block hash that is not the column
//     of its position (another rank stored that position first under another hash) is kept
//     in the rank's side map.
//
// Ranks: the Index's registry (rank table) and the tree's (runRank by rank and by id) are kept
// in step: every rank the Index knows has a runRank of its id (RegisterRanks and Reserve make
// one), and RemoveRank drops both. Removing or clearing a rank takes its id out of every span of
// each run it touches (one pass over the run's spans) and trims those runs; the tree forgets the
// id before the rank table does, so a reader never gets an id its table cannot place. A removed
// rank that comes back gets a fresh id. DumpRank and RankHashes read the rank's entries under
// the read lock and call back without it; both layouts dump through one emitter (emitDump), so
// the events are the slab's. Lock order: the tree's lock, then the registry's.
//
// MemoryBytes (runs_memory.go) adds up byte counters the tree's writers keep as they change its
// shapes, read with atomic loads (no lock, no walk): every run's pairs, spans and fork offsets
// and the run headers, at the Go allocator's size classes; the interned sets; each rank's
// lookup slots, record, store order and evicted set; the Go maps (child map, set keys, ranks,
// the lookups' side entries) from their entry counts at their peak (a Go map does not shrink);
// and the Index's record of each live rank. A writer that changes a shape without its counter
// fails the tree's audit, which walks the tree and compares part by part. It reads 0.98–1.00 of
// the live heap on the ×8 trace and on SMG's pinned and fragmented workloads
// (BenchmarkRunsMemoryBytes, TestRunsMemoryBytesTracksHeap).
//
// Concurrency: one sync.RWMutex per tree (SMG's choice for its keyspaces): an event holds the
// write side for its whole application, a query the read side for its walk. A reader therefore
// sees the state between two events, never a part of one (TestRunsConcurrentReaders checks
// every answer against the states that existed while it ran). Writers of different ranks
// serialize on the lock.
//
// Scores: the walk keeps the ranks still matching (ascending ids), intersects them with a
// span's set only when the set changes (a whole span of an unchanged set costs nothing), and
// lays out each score's ranks through the rank table as the slab's answers are.
//
// RankBuilder (runs_bulk.go): the builder keeps its own compact state — a position per path its
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
