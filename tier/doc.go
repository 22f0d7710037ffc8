// Package tier holds the storage tiers below the device cache (docs/CONTRACT.md §7): KV blocks that engines
// offload to host memory, disk or an external store, and the tier walk that extends each rank's
// device match with them. It is a package of its own because the lower tiers are not a radix
// tree (package index) but sets of continuation edges, and because a partition's state is now
// both: Tiers is what a partition holds, what the lanes apply events to and what queries read.
//
// # Model
//
// Each lower tier (host_pinned, disk, external) of a partition is an Index of continuation
// edges, Dynamo's LowerTierIndexer:
//
//	(parent block_hash | root, tokens_hash) ──► block_hash      holders: {rank ids}
//
//	root ─(11)─► 1001 {7/0, 8/0} ─(12)─► 1002 {7/0} ─(13)─► 1003 {7/0}
//	1002 ─(14)─► 2004 {8/0}              (a host chain continuing a device block)
//
// An edge is keyed by its parent block hash (or the root) and the tokens hash of its block; its
// value is the block hash. A Stored of a lower tier adds the rank to the edges of its chain from
// its parent_hash — which need not be held in that tier: a host chain usually continues a device
// block. Decisions (Dynamo's, docs/CONTRACT.md §7) and the invariants the tests check:
//
//   - First mapping wins: an edge that exists with another block hash refuses the store, and so
//     does a block hash the rank already holds under another edge; the chain stops there (its
//     later blocks would hang off an edge the tier never accepted for the rank). Refusals are
//     counted (Conflicts). Re-storing a held edge is idempotent. A chain that references itself
//     is invalid_block, refused whole.
//   - Removed names block hashes: the rank leaves their edges in that tier only; unknown hashes
//     count as block_not_found. An edge no rank holds is unlinked.
//   - Cleared (whatever tier it is tagged with), ClearRank, ReplaceRank, RemoveRank: every tier
//     of the rank, the device tree included.
//   - A rank's tier blocks are the edges it holds there; every one is expressible as a Stored,
//     so a tier's dump is exact.
//
// # The tier walk
//
// The device walk (index.FindMatchesPath) gives each rank its score d and the block hash of the
// node it matched last, path[d-1]. Then, tier by tier in the order host_pinned → disk →
// external, each rank continues from its position and anchor:
//
//	query     q0    q1    q2    q3    q4    q5
//	device   [1001][1002]                          rank 7/0: score 2, anchor 1002
//	host                 (1002,q2)►1003 (1003,q3)►1004   extension 2, anchor 1004
//	disk                             (1004,q4)►1005       extension 1
//
// A rank with no device hit starts at the root (edge (root, q0)) in the first tier that holds it
// there. A tier's figure is the extension beyond the previous tier, never a total; a rank with
// lower-tier hits only is answered with score 0. Ranks at the same point walk together: one
// edge lookup per group and query block, the group intersected with the edge's holders.
//
// # Concurrency
//
// As in package index: per rank one writer at a time (its lane); different ranks write
// concurrently. Edges live in a table striped over 64 shards by key; a shard's mutex serializes
// its writers; readers take no lock — they load a shard's table, its slots and an edge's holders
// with atomic loads, and see each edge as before or after a change. A slot goes nil → edge →
// tombstone (→ edge) and never back to nil; growing publishes a new table. Rank ids are dense,
// shared by the three tiers of a partition, never reused; the rank registry readers see is
// immutable and replaced whole when a rank is added or removed.
//
// # Memory
//
// What one (rank, edge) entry costs (BenchmarkHeapBytesPerEdge):
//
//	edge        48 B   parent, tokens, block hash, holder set pointer, inline holder, root flag
//	holder set  4·(holders+1) B rounded up to a size class, only for 2 holders or more
//	edge table  one 8-byte slot per edge, tables between 3/8 and 3/4 full
//	rank set    one 8-byte slot per (rank, edge), at most 3/4 full, grown by half
//
// Under a memory bound (engine.Config.MaxIndexBytes) the lower tiers count in the bound but are
// not evicted from: Tiers.EvictLeaves evicts device blocks only.
//
// An edge held by one rank costs about 48 + 14 + 13 ≈ 75 B; shared by k ≥ 2 ranks, its share
// is about (48 + 14 + 4·(k+1))/k + 13 B.
//
// # Restart and conflicts
//
// Each rank's log (and snapshot) carries its lower-tier events, tagged with their tier; the
// restart replay and a dump replayed elsewhere rebuild every tier. Conflicts are resolved by
// arrival: after a restart, or in a server fed a dump, two ranks that claimed one edge with
// different block hashes are resolved in the order their ranks are replayed, which need not be
// the order the events arrived in. Engines that hash blocks as a chain (Dynamo, vLLM with a
// fixed hash seed) never conflict.
package tier
