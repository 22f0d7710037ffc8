package index

// runs_memory.go: MemoryBytes on the run layout. The tree's writers keep byte counters as they
// change its shapes (under t.mu), and MemoryBytes adds them up with atomic loads: O(1) per
// scrape, no lock, no walk (the memory bound reads it every few block operations of every lane).
// The arrays are counted as the Go allocator rounds them (its size classes; pages above 32 KiB);
// the Go maps (child map, interned sets' keys, ranks, the lookups' rare side entries) from their
// entry counts at the maps' peak, since a Go map does not shrink.

import (
	"math/bits"
	"slices"
	"sync/atomic"
	"unsafe"
)

// runMem is the run tree's heap, by part (bytes unless named a count).
type runMem struct {
	runs    atomic.Int64 // the run headers (80 B each) beyond the root's
	pairs   atomic.Int64 // every run's (tokens, block hash) array
	spans   atomic.Int64 // every run's spans
	kidOffs atomic.Int64 // every run's fork offsets
	// kids and kidsPeak count the child map's entries, now and at most.
	kids, kidsPeak atomic.Int64
	sets           atomic.Int64 // the interned sets' arrays, and the interner's id → set and refcount slots
	// setKeys and setKeysPeak count the interner's key map entries, now and at most.
	setKeys, setKeysPeak atomic.Int64
	ranks                atomic.Int64 // each rank's record and the byID slots
	// rankN and rankPeak count the ranks map's entries, now and at most.
	rankN, rankPeak atomic.Int64
	lookups         atomic.Int64 // the ranks' lookup slots
	side            atomic.Int64 // count: entries of the ranks' side maps (lookup other, extra)
	order, evicted  atomic.Int64 // eviction (runs_evict.go): store orders and evicted sets
}

// Per-entry costs of Go maps, by slot size (key and value, padded): a swiss-table slot plus its
// control byte, at the tables' load after growth (between 7/16 and 7/8 full; mapBytes).
const (
	kidSlot    = 24 // kidKey (16 B) → uint32
	setKeySlot = 24 // string header (16 B) → uint32
	rankSlot   = 24 // event.Rank (16 B) → *runRank
	sideEntry  = 28 // uint64 → rpos, or rpos → int32: 16 B slots, at a typical load
)

// sizeClasses are the Go allocator's small object sizes (internal/runtime/gc, Go 1.26).
var sizeClasses = [...]uint32{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
	288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048,
	2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880,
	12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// allocBytes returns what an allocation of n bytes takes from the heap: its size class, or whole
// 8 KiB pages above 32 KiB. Pointer-free objects under 16 B share 16-byte blocks (the tiny
// allocator): they are counted as they are.
func allocBytes(n int) int64 {
	switch {
	case n <= 0:
		return 0
	case n < 16:
		return int64(n)
	case n > 32768:
		return int64((n + 8191) &^ 8191)
	}
	lo, hi := 0, len(sizeClasses)-1
	for lo < hi {
		if m := (lo + hi) / 2; int(sizeClasses[m]) < n {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return int64(sizeClasses[lo])
}

func sliceBytes[T any](s []T) int64 {
	var z T
	return allocBytes(cap(s) * int(unsafe.Sizeof(z)))
}

// mapBytes estimates a Go map that held at most peak entries of slot bytes: its groups (8 slots
// and 8 control bytes) at a power of two of slots at most 7/8 full.
func mapBytes(peak int64, slot int) int64 {
	if peak <= 0 {
		return 0
	}
	if peak <= 8 {
		return int64(8 + 8*slot)
	}
	slots := int64(1) << bits.Len64(uint64(peak*8/7))
	return slots * int64(slot+1)
}

// raise sets peak to at least v (writers only: under t.mu).
func raise(peak *atomic.Int64, v int64) {
	if v > peak.Load() {
		peak.Store(v)
	}
}

// bytes adds up the parts.
func (m *runMem) bytes() uint64 {
	b := m.runs.Load() + m.pairs.Load() + m.spans.Load() + m.kidOffs.Load() + m.sets.Load() + m.ranks.Load() +
		m.lookups.Load() + m.order.Load() + m.evicted.Load() + sideEntry*m.side.Load() +
		mapBytes(m.kidsPeak.Load(), kidSlot) + mapBytes(m.setKeysPeak.Load(), setKeySlot) + mapBytes(m.rankPeak.Load(), rankSlot)
	return uint64(max(b, 0))
}

// memoryBytes is the run tree's part of MemoryBytes.
func (t *runTree) memoryBytes() uint64 { return t.mem.bytes() }

// memoryBytesRuns is MemoryBytes on the run layout: the tree's counters, and the Index's own
// record of each live rank (indexRankBytes).
func (ix *Index) memoryBytesRuns() uint64 {
	return ix.runs.memoryBytes() + uint64(ix.table.Load().live())*indexRankBytes
}

// indexRankBytes is what the Index keeps per live rank beside the tree: its rankEntry, its
// byRank map entry (24-byte slots, estimated as the tree's maps are) and its rank table slots
// (byID, ord, byOrd, sizes).
var indexRankBytes = uint64(allocBytes(int(unsafe.Sizeof(rankEntry{}))) + 42 + 8 + 4 + 16 + 8)

// ---- the writers' hooks (runs.go), each under t.mu ----

// growRuns appends a free run header to t.runs.
func (t *runTree) growRuns() {
	old := t.runs
	t.runs = append(t.runs, runChain{})
	t.mem.runs.Add(sliceBytes(t.runs) - sliceBytes(old))
}

// newPairs returns an empty pairs array with room for n positions.
func (t *runTree) newPairs(n int) []runPair {
	s := make([]runPair, 0, n)
	t.mem.pairs.Add(sliceBytes(s))
	return s
}

// growPairs returns s with room for n more positions.
func (t *runTree) growPairs(s []runPair, n int) []runPair {
	g := slices.Grow(s, n)
	t.mem.pairs.Add(sliceBytes(g) - sliceBytes(s))
	return g
}

// clonePairs returns s in an array of its own length (a cut run giving room back).
func (t *runTree) clonePairs(s []runPair) []runPair {
	c := append(s[:0:0], s...)
	t.mem.pairs.Add(sliceBytes(c) - sliceBytes(s))
	return c
}

// forked appends offset o to kidOffs for a child run just put in the child map.
func (t *runTree) forked(kidOffs []uint32, o uint32) []uint32 {
	k := append(kidOffs, o)
	t.mem.kidOffs.Add(sliceBytes(k) - sliceBytes(kidOffs))
	raise(&t.mem.kidsPeak, t.mem.kids.Add(1))
	return k
}

// unlinked drops an empty run's arrays and its child map entry.
func (t *runTree) unlinked(c *runChain) {
	t.mem.pairs.Add(-sliceBytes(c.pairs))
	t.mem.spans.Add(-sliceBytes(c.spans))
	t.mem.kidOffs.Add(-sliceBytes(c.kidOffs))
	t.mem.kids.Add(-1)
}

// respanned accounts a run's spans replaced by out.
func (t *runTree) respanned(old, out []runSpan) {
	t.mem.spans.Add(sliceBytes(out) - sliceBytes(old))
}

// lkResize rehashes m into size slots.
func (t *runTree) lkResize(m *runLookup, size int) {
	t.mem.lookups.Add(allocBytes(8*size) - allocBytes(8*len(m.slots)))
	m.grow(size)
}

// rankMade accounts a new rank's record, its ranks map entry and byID's growth (oldByID its
// former capacity).
func (t *runTree) rankMade(oldByID int) {
	t.mem.ranks.Add(allocBytes(int(sizeofRunRank)) + allocBytes(8*cap(t.byID)) - allocBytes(8*oldByID))
	raise(&t.mem.rankPeak, t.mem.rankN.Add(1))
}

// setMade accounts a new interned set (its array, its key, the interner's slots grown to
// oldIDs, oldRefs capacities before).
func (s *setInterner) setMade(own []uint32, oldIDs, oldRefs int) {
	if s.mem == nil {
		return
	}
	d := sliceBytes(own) + sliceBytes(s.ids) - allocBytes(24*oldIDs) + sliceBytes(s.refs) - allocBytes(4*oldRefs)
	s.mem.sets.Add(d)
	raise(&s.mem.setKeysPeak, s.mem.setKeys.Add(1))
}

// setFreed accounts an interned set given up.
func (s *setInterner) setFreed(ids []uint32) {
	if s.mem == nil {
		return
	}
	s.mem.sets.Add(-sliceBytes(ids))
	s.mem.setKeys.Add(-1)
}

var (
	sizeofRunChain = unsafe.Sizeof(runChain{})
	sizeofRunRank  = unsafe.Sizeof(runRank{})
)

// countLookup accounts rs's lookup and side maps built whole (a RankBuilder's commit: after
// forgetRank(rs) and rs.lk, rs.extra = …).
func (t *runTree) countLookup(rs *runRank) {
	t.mem.lookups.Add(allocBytes(8 * len(rs.lk.slots)))
	t.mem.side.Add(int64(len(rs.lk.other) + len(rs.extra)))
}

// rankDropped accounts a rank's record dropped from the tree (RemoveRank: after forgetRank,
// with its ranks and byID entries).
func (t *runTree) rankDropped() {
	t.mem.ranks.Add(-allocBytes(int(sizeofRunRank)))
	t.mem.rankN.Add(-1)
}
