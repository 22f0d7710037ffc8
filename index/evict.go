package index

import "github.com/kvindex/kvindex/event"

// Eviction (doc.go "Eviction"): with Options.Evictable each rank keeps its block hashes in the
// order it first stored them (order, 8 B per entry), and EvictLeaves removes the rank's least
// recently stored chains, each from its leaf up (runs_evict.go). Eviction only ever makes a rank
// leave a position it holds, as a Removed would, so every score after it is at most the score before it (an
// under-count, never an over-count). It is not an event: Counts does not count it and nothing is
// logged.

// EvictLeaves removes up to n blocks of rank r and returns how many it removed. It takes the
// rank's least recently first-stored block still held, follows the chain below it along the
// positions r holds under their own block hash (the next offsets of its run, and the run that
// continues a full one) down to its end, and removes r's blocks from that end up (a leaf first);
// then the next oldest. A branch of r's below an evicted block (a run forked mid-chain) is left
// stranded: it counts in tree_size but in no score, and is evicted in its own turn. Without Options.Evictable, or for an unknown rank,
// it removes nothing. A writer method (the rank's lane).
func (ix *Index) EvictLeaves(r event.Rank, n int) int { return ix.evictLeavesRuns(r, n) }

// RankEvictions returns the blocks evicted from r since it became known in this process (0 for
// an unknown rank). Safe on any goroutine.
func (ix *Index) RankEvictions(r event.Rank) uint64 { return ix.rankEvictionsRuns(r) }

// Evictions returns the blocks evicted from every rank of the index since it was built
// (removed ranks included). Safe on any goroutine.
func (ix *Index) Evictions() uint64 { return ix.runs.evict.total.Load() }
