package testutil

import "github.com/kvindex/kvindex/event"

// ChainFleet is the memory-bound tests' stream: ranks with worker ids 1..Workers (dp rank 0),
// each storing Chains chains of PerChain blocks, one Stored event per chain (event id c+1).
// Every rank stores chain c's tokens hashes (Path) under block hashes of its own (Hash), so the
// ranks share no node's lookup entry and each chain can be scored per rank.
type ChainFleet struct{ Workers, Chains, PerChain int }

// Path returns chain c's tokens hashes: the query that scores it.
func (f ChainFleet) Path(c int) []uint64 {
	out := make([]uint64, f.PerChain)
	for j := range out {
		out[j] = uint64(c)<<16 | uint64(j) + 1
	}
	return out
}

// Hash returns worker w's block hash of block j of chain c.
func (f ChainFleet) Hash(w uint64, c, j int) uint64 { return w<<40 | uint64(c)<<16 | uint64(j) + 1 }

// Stored returns worker w's Stored event of chain c.
func (f ChainFleet) Stored(w uint64, c int) event.RouterEvent {
	path := f.Path(c)
	blocks := make([]event.Block, f.PerChain)
	for j := range blocks {
		blocks[j] = event.Block{BlockHash: f.Hash(w, c, j), TokensHash: path[j]}
	}
	return event.Stored(event.Rank{WorkerID: w}, uint64(c+1), nil, blocks...)
}
