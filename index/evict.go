package index

import (
	"github.com/kvindex/kvindex/event"
)

// Eviction (doc.go "Eviction"): with Options.Evictable each rank keeps its block hashes in the
// order it first stored them (order, 8 B per entry), and EvictLeaves removes the rank's least
// recently stored chains, each from its leaf up. Eviction only ever makes a rank leave a node it
// holds, as a Removed would, so every score after it is at most the score before it (an
// under-count, never an over-count). It is not an event: Counts does not count it and nothing is
// logged.

// holds reports whether rs holds block hash h.
func (rs *rankEntry) holds(h uint64) bool {
	_, ok := rs.lookup.get(h)
	return ok
}

// noteStored records that rs newly holds block hash h (attach, with Options.Evictable).
func (ix *Index) noteStored(rs *rankEntry, h uint64) {
	ix.orderSlots.Add(int64(rs.ord.note(h, rs.lookup.len(), rs.holds)))
}

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
	o, e := rs.ord.reset()
	ix.orderSlots.Add(-int64(o))
	ix.evictedSlots.Add(-int64(e))
}

// EvictLeaves removes up to n blocks of rank r and returns how many it removed. It takes the
// rank's least recently first-stored block still held, follows the chain below it through the
// first children r holds under their own block hash down to its end, and removes r's blocks from
// that end up (a leaf first); then the next oldest. A branch of r's below an evicted block (a
// child that is not its parent's first child) is left stranded: it counts in tree_size but in
// no score, and is evicted in its own turn. Without Options.Evictable, or for an unknown rank,
// it removes nothing. A writer method (the rank's lane).
func (ix *Index) EvictLeaves(r event.Rank, n int) int {
	if ix.runs != nil {
		return ix.evictLeavesRuns(r, n)
	}
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
	ix.orderSlots.Add(int64(o.settle(rs.holds))) // give back the room of what was evicted
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
	ix.evictedSlots.Add(int64(rs.ord.remember(k, rs.lookup.len())))
}

// RankEvictions returns the blocks evicted from r since it became known in this process (0 for
// an unknown rank). Safe on any goroutine.
func (ix *Index) RankEvictions(r event.Rank) uint64 {
	if ix.runs != nil {
		return ix.rankEvictionsRuns(r)
	}
	if rs := ix.rankOf(r); rs != nil {
		return rs.evictions.Load()
	}
	return 0
}

// Evictions returns the blocks evicted from every rank of the index since it was built
// (removed ranks included). Safe on any goroutine.
func (ix *Index) Evictions() uint64 {
	if ix.runs != nil {
		return ix.runs.evict.total.Load()
	}
	return ix.evictions.Load()
}
