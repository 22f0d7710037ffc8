package engine

import "github.com/kvindex/kvindex/partition"

// The memory bound (Config.MaxIndexBytes, docs/ENGINE.md "Memory bound"): the index — every
// partition's device tree and lower tiers, as kvindex_memory_bytes{part="index"} reports them
// (tier.Tiers.MemoryBytes) — is kept within the bound by evicting device blocks on the ranks'
// lanes (lanes/evict.go, index.Index.EvictLeaves). The engine only measures: boundEvictor tells
// the lanes how many (rank, block) entries they are over. Online checkpoints are off under a
// bound (Open): a checkpoint snapshots the tree with its evictions, and a restart replaying from
// it would no longer know which blocks were evicted (a later Removed of one would count as
// block_not_found); without them the replay re-applies the log and evicts again. Retention's
// folds replay the log, not the tree, so they keep every block.

// boundRoom is the share of the bound a lane sheds below it once over (1/50: 2 %), so that
// evictions come in rounds rather than one block per event.
const boundRoom = 50

// boundEvictor measures the index against Config.MaxIndexBytes (lanes.Evictor).
type boundEvictor struct {
	max   uint64
	lanes int
	parts *partition.Set
}

// boundEntryBytes is a low estimate of a device entry's cost (index/doc.go "Memory": about 61 B
// unshared, less when shared), used only to space the looks at the bound.
const boundEntryBytes = 32

// CheckEvery spaces the looks at the bound so that all lanes together may overshoot it by about
// 1 % (at boundEntryBytes per entry), between 16 and 65,536 block operations per lane.
func (b *boundEvictor) CheckEvery() uint64 {
	return min(max(b.max/100/boundEntryBytes/uint64(max(b.lanes, 1)), 16), 65536)
}

// Over returns how many device entries to evict for the index to be 2 % under the bound, at the
// index's average cost per device entry; 0 within the bound. It reads each partition's counts
// (atomics and the 256 child-table sizes), never walks a tree.
func (b *boundEvictor) Over() int {
	mem, blocks := b.usage()
	if mem <= b.max || blocks == 0 {
		return 0
	}
	target := b.max - b.max/boundRoom
	per := max(mem/blocks, 1)
	return int(min((mem-target+per-1)/per, blocks))
}

// usage returns the index's memory estimate and its device (rank, block) entries.
func (b *boundEvictor) usage() (mem, blocks uint64) {
	for _, p := range b.parts.All() {
		mem += p.Tiers.MemoryBytes()
		blocks += p.Tiers.Device.Blocks()
	}
	return mem, blocks
}

// indexMemory returns the index's memory estimate (every partition's tiers) and the bound
// (Config.MaxIndexBytes; 0 unbounded).
func (e *Engine) indexMemory() (bytes, bound uint64) {
	b := boundEvictor{parts: e.parts}
	mem, _ := b.usage()
	return mem, e.cfg.MaxIndexBytes
}

// Evictions returns the device blocks evicted under the memory bound from partition id since
// the process started (the restart replay's included), 0 for an unknown partition.
func (e *Engine) Evictions(id uint32) uint64 {
	if p := e.parts.Get(id); p != nil {
		return p.Tiers.Device.Evictions()
	}
	return 0
}

// RankEvictions returns the device blocks evicted under the memory bound from rank rk since
// the process started (or the rank came back), 0 for an unknown rank.
func (e *Engine) RankEvictions(rk Rank) uint64 {
	if p := e.parts.Get(rk.Partition); p != nil {
		return p.Tiers.Device.RankEvictions(rk)
	}
	return 0
}
