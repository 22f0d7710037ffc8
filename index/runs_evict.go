package index

// runs_evict.go: eviction (doc.go "Eviction") on the run layout, and the store order both layouts
// keep (orderState). With Options.Evictable each rank keeps the block hashes it newly stored, in
// that order; EvictLeaves takes the least recently first-stored block the rank still holds,
// follows its chain down through the positions the rank holds under their own block hash (the
// next offsets of the same run; at the end of a full run, its child run, where the run was
// continued), and makes the rank leave them from the chain's end up, as a Removed would: a
// score after it is never above the score before it. The rank remembers what it evicted
// (orderState.evicted): a later Removed of it is not block_not_found, a Stored under it is
// evicted at once, and re-storing it holds it again. Cleared and removal forget it.

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvindex/kvindex/event"
)

// ---- the store order (both layouts) ----

// orderState is a rank's store order and the block hashes evicted from it; writer-owned.
type orderState struct {
	order []uint64 // block hashes in first-store order; order[head:] is live, stale ones skipped
	head  int
	// evicted holds the hashes evicted and not since removed, re-stored or cleared, so that a
	// later Removed of one is not block_not_found. Capped (maxEvictedSet).
	evicted hashSet
}

// maxEvictedSet caps a rank's evicted set at a quarter of its live blocks plus 64, so that the
// set (8 B a slot, 10 to 15 B an entry, counted in MemoryBytes) stays a small share of what the
// bound keeps (an eviction that only unshares a node frees 13 B: its lookup entry and holder
// set share). Beyond it an eviction is not remembered, and a later Removed of that block counts
// as block_not_found.
func maxEvictedSet(live int) int { return live/4 + 64 }

// note records that the rank newly holds block hash h; live is its block count, held tells
// whether it holds a hash. It returns the change in the order's slots.
func (o *orderState) note(h uint64, live int, held func(uint64) bool) (slots int) {
	o.evicted.del(h)
	if len(o.order)-o.head > 2*live+64 {
		slots += o.compact(held, false)
	} else if o.head > 0 && len(o.order) == cap(o.order) && 2*o.head >= len(o.order) {
		n := copy(o.order, o.order[o.head:])
		o.order, o.head = o.order[:n], 0
	}
	if c := cap(o.order); len(o.order) == c {
		// Grown by a quarter, not doubled: the order is counted in MemoryBytes, and ranks of a
		// fleet grow alike, so doubling steps would make the bound's measure jump.
		grown := make([]uint64, len(o.order), c+c/4+8)
		copy(grown, o.order)
		o.order = grown
		slots += cap(grown) - c
	}
	o.order = append(o.order, h)
	return slots
}

// compact drops the stale entries of the order (hashes the rank no longer holds) and the older
// duplicates of a hash (removed, then stored again), keeping the order of the rest. It compacts
// in place (a pooled set finds the duplicates); with shrink (after an eviction) it reallocates
// to give back room when the array is more than twice what is kept (plus 64). It returns the
// change in the order's slots.
func (o *orderState) compact(held func(uint64) bool, shrink bool) (slots int) {
	live := o.order[o.head:]
	seen := seenSets.Get().(map[uint64]struct{})
	w := len(live) // live[w:] is kept, newest last; w only moves down, behind the reads
	for i := len(live) - 1; i >= 0; i-- {
		h := live[i]
		if _, dup := seen[h]; dup {
			continue
		}
		if !held(h) {
			continue
		}
		seen[h] = struct{}{}
		w--
		live[w] = h
	}
	clear(seen)
	seenSets.Put(seen)
	kept := live[w:]
	keep := o.order[:copy(o.order, kept)]
	if shrink && cap(keep) > 2*len(keep)+64 {
		keep = append(make([]uint64, 0, len(keep)+len(keep)/4+8), keep...)
	}
	slots = cap(keep) - cap(o.order)
	o.order, o.head = keep, 0
	return slots
}

// seenSets are compact's scratch sets.
var seenSets = sync.Pool{New: func() any { return make(map[uint64]struct{}) }}

// settle gives back the room of what an eviction took from the order; it returns the change in
// the order's slots.
func (o *orderState) settle(held func(uint64) bool) (slots int) {
	if o.head == len(o.order) {
		o.order, o.head = o.order[:0], 0
	}
	if cap(o.order) > 2*(len(o.order)-o.head)+64 {
		return o.compact(held, true)
	}
	return 0
}

// remember adds evicted block hash k to the evicted set, unless the set is full for a rank of
// live blocks; it returns the change in the set's slots.
func (o *orderState) remember(k uint64, live int) (slots int) {
	if o.evicted.len() >= maxEvictedSet(live) {
		return 0
	}
	c := o.evicted.cap()
	o.evicted.add(k)
	return o.evicted.cap() - c
}

// reset drops the order and the evicted set (Cleared, ReplaceRank, RemoveRank) and returns the
// slots they held.
func (o *orderState) reset() (orderSlots, evictedSlots int) {
	orderSlots, evictedSlots = cap(o.order), o.evicted.cap()
	*o = orderState{}
	return orderSlots, evictedSlots
}

// ---- the run layout ----

// runEvict is the run tree's side of eviction.
type runEvict struct {
	on    bool          // Options.Evictable: ranks keep their store order
	total atomic.Uint64 // blocks evicted from every rank, removed ones included
}

// runRankEvict is a rank's side of eviction on the run layout.
type runRankEvict struct {
	ord       orderState    // writer-owned (under t.mu)
	evictions atomic.Uint64 // blocks evicted from the rank
}

// heldBy returns whether rs holds a block hash.
func (t *runTree) heldBy(rs *runRank) func(uint64) bool {
	return func(h uint64) bool {
		_, ok := t.lkGet(&rs.lk, h)
		return ok
	}
}

// noteStored records that rs newly holds block hash h (apply, with Options.Evictable).
func (t *runTree) noteStored(rs *runRank, h uint64) {
	if t.evict.on {
		o := &rs.ev.ord
		b := sliceBytes(o.order)
		o.note(h, rs.blocks, t.heldBy(rs))
		t.mem.order.Add(sliceBytes(o.order) - b)
	}
}

// remember adds evicted block hash k to rs's evicted set.
func (t *runTree) remember(rs *runRank, k uint64) {
	o := &rs.ev.ord
	b := sliceBytes(o.evicted.slots)
	o.remember(k, rs.blocks)
	t.mem.evicted.Add(sliceBytes(o.evicted.slots) - b)
}

// forgetRank drops what rs's lookup, side maps, order and evicted set are counted for, and the
// order and evicted set themselves: a Cleared (apply), and whatever clears or removes a rank
// (ClearRank, ReplaceRank, RemoveRank) before it drops rs's lookup.
func (t *runTree) forgetRank(rs *runRank) {
	t.mem.lookups.Add(-allocBytes(8 * len(rs.lk.slots)))
	t.mem.side.Add(-int64(len(rs.lk.other) + len(rs.extra)))
	o := &rs.ev.ord
	t.mem.order.Add(-sliceBytes(o.order))
	t.mem.evicted.Add(-sliceBytes(o.evicted.slots))
	o.reset()
}

// evictedBelow handles a Stored of rs whose parent rs does not hold: when the parent was
// evicted, the event's blocks are evicted at once (remembered as evicted, counted, not held) and
// it reports true; otherwise false (parent_block_not_found). A block rs holds elsewhere would
// move under the parent: it is evicted from where it is. Invariant: a rank's evicted set and its
// held blocks are disjoint.
func (t *runTree) evictedBelow(rs *runRank, ev *event.RouterEvent, buf *[]uint32) bool {
	if !rs.ev.ord.evicted.has(ev.ParentHash) {
		return false
	}
	for _, b := range ev.Blocks {
		if p, held := t.lkDel(&rs.lk, b.BlockHash); held {
			rs.blocks--
			t.unref(rs, p, buf)
		}
		t.remember(rs, b.BlockHash)
	}
	rs.ev.evictions.Add(uint64(len(ev.Blocks)))
	t.evict.total.Add(uint64(len(ev.Blocks)))
	return true
}

// below returns the position that continues p's chain where the slab's first child would: the
// next offset of p's run; at the end of a full run (runMaxLen positions), the child run it was
// continued in (the lowest id of the runs forked there: found by a scan of the child map, once
// per 65,535 positions).
func (t *runTree) below(p rpos) (rpos, bool) {
	r, o := posRun(p), posOff(p)
	c := &t.runs[r]
	if int(o)+1 < len(c.pairs) {
		return p + 1, true
	}
	if len(c.pairs) < runMaxLen || !slices.Contains(c.kidOffs, o) {
		return 0, false
	}
	best := uint32(0)
	for k, id := range t.kids {
		if k.at == p && (best == 0 || id < best) {
			best = id
		}
	}
	return mkpos(best, 0), best != 0
}

// evictLeaves removes up to n of rs's blocks (Index.EvictLeaves) and returns how many. Under
// t.mu's write side.
func (t *runTree) evictLeaves(rs *runRank, n int) int {
	o := &rs.ev.ord
	held := t.heldBy(rs)
	var buf []uint32
	var path []rpos // the chain from the oldest held block down
	done := 0
	for done < n && o.head < len(o.order) {
		h := o.order[o.head]
		top, ok := t.lkGet(&rs.lk, h)
		if !ok {
			o.head++ // stale: removed, moved away or already evicted
			continue
		}
		path = append(path[:0], top)
		for p := top; ; {
			q, ok := t.below(p)
			if !ok {
				break
			}
			if m, ok := t.lkGet(&rs.lk, t.column(q)); !ok || m != q || rs.extra[q] != 0 {
				break
			}
			path = append(path, q)
			p = q
		}
		// path[from:] goes, from the leaf up: below the top a run's stretch at a time (one
		// span update and trim), then the top (which rs may hold under two hashes).
		from := len(path) - min(len(path), n-done)
		for j := len(path); j > max(from, 1); {
			r := posRun(path[j-1])
			i := j - 1
			for i > max(from, 1) && posRun(path[i-1]) == r {
				i--
			}
			for _, p := range path[i:j] {
				k := t.column(p)
				t.lkDel(&rs.lk, k)
				rs.blocks--
				t.remember(rs, k)
			}
			t.setRange(r, posOff(path[i]), posOff(path[j-1])+1, rs.id, false, &buf)
			t.trim(r)
			done += j - i
			j = i
		}
		if from == 0 {
			t.lkDel(&rs.lk, h)
			rs.blocks--
			t.unref(rs, top, &buf)
			t.remember(rs, h)
			done++
			o.head++
		}
	}
	b := sliceBytes(o.order)
	o.settle(held)
	t.mem.order.Add(sliceBytes(o.order) - b)
	if m := &rs.lk; len(m.slots) > 16 && 5*m.n < 2*len(m.slots) {
		t.lkResize(m, max(16, 3*m.n/2+1)) // under 2/5 full: back to 2/3
	}
	rs.ev.evictions.Add(uint64(done))
	t.evict.total.Add(uint64(done))
	return done
}

// evictLeavesRuns is EvictLeaves on the run layout: the tree's write lock for the whole
// eviction, then the rank's published block count and the index's totals.
func (ix *Index) evictLeavesRuns(r event.Rank, n int) int {
	t := ix.runs
	if !t.evict.on || n <= 0 {
		return 0
	}
	t.mu.Lock()
	rr := t.ranks[r]
	if rr == nil {
		t.mu.Unlock()
		return 0
	}
	done := t.evictLeaves(rr, n)
	blocks := uint64(rr.blocks)
	ix.nodeCount.Store(int64(t.positions)) // under the lock, as applyRuns: never a stale count
	t.mu.Unlock()
	if rs := ix.rankOf(r); rs != nil {
		ix.blocks.Add(int64(blocks) - int64(rs.blocks.Swap(blocks)))
	}
	return done
}

// rankEvictionsRuns is RankEvictions on the run layout.
func (ix *Index) rankEvictionsRuns(r event.Rank) uint64 {
	t := ix.runs
	t.mu.RLock()
	defer t.mu.RUnlock()
	if rr := t.ranks[r]; rr != nil {
		return rr.ev.evictions.Load()
	}
	return 0
}
