package index

import (
	"sync"

	"github.com/kvindex/kvindex/event"
)

// Eviction (doc.go "Eviction"): with Options.Evictable each rank keeps its block hashes in the
// order it first stored them (order, 8 B per entry), and EvictLeaves removes the rank's least
// recently stored chains, each from its leaf up. Eviction only ever makes a rank leave a node it
// holds, as a Removed would, so every score after it is at most the score before it (an
// under-count, never an over-count). It is not an event: Counts does not count it and nothing is
// logged.

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
// set share). Beyond it an
// eviction is not remembered, and a later Removed of that block counts as block_not_found.
func maxEvictedSet(live int) int { return live/4 + 64 }

// noteStored records that rs newly holds block hash h (attach, with Options.Evictable).
func (ix *Index) noteStored(rs *rankEntry, h uint64) {
	o := &rs.ord
	o.evicted.del(h)
	if len(o.order)-o.head > 2*rs.lookup.len()+64 {
		ix.compactOrder(rs, false)
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
		ix.orderSlots.Add(int64(cap(grown) - c))
	}
	o.order = append(o.order, h)
}

// compactOrder drops the stale entries of rs's order (hashes rs no longer holds) and the older
// duplicates of a hash (removed, then stored again), keeping the order of the rest. It compacts
// in place (a pooled set finds the duplicates); with shrink (after an eviction) it reallocates to
// give back room when the array is more than twice what is kept (plus 64).
func (ix *Index) compactOrder(rs *rankEntry, shrink bool) {
	o := &rs.ord
	live := o.order[o.head:]
	seen := seenSets.Get().(map[uint64]struct{})
	w := len(live) // live[w:] is kept, newest last; w only moves down, behind the reads
	for i := len(live) - 1; i >= 0; i-- {
		h := live[i]
		if _, dup := seen[h]; dup {
			continue
		}
		if _, ok := rs.lookup.get(h); !ok {
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
	ix.orderSlots.Add(int64(cap(keep) - cap(o.order)))
	o.order, o.head = keep, 0
}

// seenSets are compactOrder's scratch sets.
var seenSets = sync.Pool{New: func() any { return make(map[uint64]struct{}) }}

// forgetEvicted reports whether h was evicted from rs (and forgets it): a Removed of it is then
// not block_not_found.
func (ix *Index) forgetEvicted(rs *rankEntry, h uint64) bool {
	return rs.ord.evicted.del(h)
}

// evictedBelow handles a Stored of rs whose parent rs does not hold: when the parent was
// evicted, the event's blocks are evicted at once (remembered as evicted, counted, not held) and
// it reports true; otherwise false (parent_block_not_found). A block the rank holds elsewhere
// would move under the parent (attach): it is evicted from where it is. Invariant: a rank's
// evicted set and its held blocks are disjoint.
func (ix *Index) evictedBelow(rs *rankEntry, ev *event.RouterEvent) bool {
	if !rs.ord.evicted.has(ev.ParentHash) {
		return false
	}
	var d deltas
	for _, b := range ev.Blocks {
		if _, held := rs.lookup.get(b.BlockHash); held {
			ix.evictOne(rs, b.BlockHash, &d) // it moves under the evicted parent: evicted too
		} else {
			ix.rememberEvicted(rs, b.BlockHash)
		}
	}
	ix.publish(rs, &d)
	rs.evictions.Add(uint64(len(ev.Blocks)))
	ix.evictions.Add(uint64(len(ev.Blocks)))
	return true
}

// resetOrder drops rs's order and evicted set (Cleared, ReplaceRank, RemoveRank); the eviction
// total stays.
func (ix *Index) resetOrder(rs *rankEntry) {
	o := &rs.ord
	ix.orderSlots.Add(-int64(cap(o.order)))
	ix.evictedSlots.Add(-int64(o.evicted.cap()))
	o.order, o.head, o.evicted = nil, 0, hashSet{}
}

// EvictLeaves removes up to n blocks of rank r and returns how many it removed. It takes the
// rank's least recently first-stored block still held, follows the chain below it through the
// first children r holds under their own block hash down to its end, and removes r's blocks from
// that end up (a leaf first); then the next oldest. A branch of r's below an evicted block (a
// child that is not its parent's first child) is left stranded: it counts in tree_size but in
// no score, and is evicted in its own turn. Without Options.Evictable, or for an unknown rank,
// it removes nothing. A writer method (the rank's lane).
func (ix *Index) EvictLeaves(r event.Rank, n int) int {
	ix.runsUnsupported("EvictLeaves")
	if !ix.opts.Evictable || n <= 0 {
		return 0
	}
	rs := ix.rankOf(r)
	if rs == nil {
		return 0
	}
	o := &rs.ord
	var d deltas
	done := 0
	var path []nref
	g := ix.ep.enter()
	defer ix.ep.exit(g)
	for done < n && o.head < len(o.order) {
		h := o.order[o.head]
		top, ok := rs.lookup.get(h)
		if !ok {
			o.head++ // stale: removed, moved away or already evicted
			continue
		}
		path = append(path[:0], top)
		for c := ix.at(top).first.Load(); c != 0; c = ix.at(c).first.Load() {
			if m, ok := rs.lookup.get(ix.at(c).hash); !ok || m != c || rs.refs[c] != 0 {
				break
			}
			path = append(path, c)
		}
		for i := len(path) - 1; i >= 0 && done < n; i-- {
			k := ix.at(path[i]).hash
			if i == 0 {
				k = h
			}
			ix.evictOne(rs, k, &d)
			done++
			if i == 0 {
				o.head++
			}
		}
	}
	if o.head == len(o.order) {
		o.order, o.head = o.order[:0], 0
	}
	if cap(o.order) > 2*(len(o.order)-o.head)+64 {
		ix.compactOrder(rs, true) // give back the room of what was evicted
	}
	if m := &rs.lookup; len(m.tags) > minLookup && 5*m.n < 2*len(m.tags) {
		m.resize(max(minLookup, 3*m.n/2+1)) // under 2/5 full: back to 2/3 (MemoryBytes counts 13 B an entry)
	}
	ix.publish(rs, &d)
	rs.evictions.Add(uint64(done))
	ix.evictions.Add(uint64(done))
	return done
}

// evictOne removes block hash k (held) from rs and remembers it as evicted.
func (ix *Index) evictOne(rs *rankEntry, k uint64, d *deltas) {
	nd, _ := rs.lookup.del(k)
	d.blocks--
	ix.release(rs, nd, d)
	ix.rememberEvicted(rs, k)
}

// rememberEvicted adds k to rs's evicted set, unless the set is full.
func (ix *Index) rememberEvicted(rs *rankEntry, k uint64) {
	o := &rs.ord
	if o.evicted.len() >= maxEvictedSet(rs.lookup.len()) {
		return
	}
	c := o.evicted.cap()
	o.evicted.add(k)
	if d := o.evicted.cap() - c; d != 0 {
		ix.evictedSlots.Add(int64(d))
	}
}

// RankEvictions returns the blocks evicted from r since it became known in this process (0 for
// an unknown rank). Safe on any goroutine.
func (ix *Index) RankEvictions(r event.Rank) uint64 {
	if rs := ix.rankOf(r); rs != nil {
		return rs.evictions.Load()
	}
	return 0
}

// Evictions returns the blocks evicted from every rank of the index since it was built
// (removed ranks included). Safe on any goroutine.
func (ix *Index) Evictions() uint64 { return ix.evictions.Load() }
