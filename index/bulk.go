package index

import "github.com/kvindex/kvindex/event"

// RankBuilder rebuilds one empty rank from its events without touching the shared tree until
// Commit: Apply runs the rank's semantics (Index.Apply: validation, parent lookup, moves,
// second hashes at one position, mid-chain removals that strand blocks, Cleared) on private
// maps, and Commit links only the positions the rank holds at the end, and their ancestors,
// once each. A restart replays a log that stored and removed the same blocks many times over
// (a never-compacted log holds every churn): the tree sees its final state only, with no node
// created and unlinked again, no shard lock per operation and the block lookup sized once.
//
// The rank must hold nothing when the builder is made (a fresh replay); at most one goroutine
// uses a builder, and no other writer writes its rank until Commit returned. Other ranks are
// written concurrently as usual; readers see the rank's blocks appear during Commit, never a
// position the rank does not hold.
type RankBuilder struct {
	ix *Index
	// runs is the rank's private state (runs_bulk.go: positions, lookup, counts), which both
	// layouts apply events to; only Commit differs. Kept for the next rank.
	runs *runBuilder
	// Commit's scratch on the slab, kept for the next rank.
	nodes  []nref
	pinned []nref
}

// NewRankBuilder returns a builder for rank r, which must hold nothing in ix (ok false
// otherwise: apply its events one by one instead).
func (ix *Index) NewRankBuilder(r event.Rank) (*RankBuilder, bool) {
	b := &RankBuilder{}
	return b, b.Reset(ix, r)
}

// Reset makes b a builder for rank r of ix, keeping the memory it grew for an earlier rank (the
// replay of many ranks reuses one). It reports false, and b must not be used, when r holds
// something in ix.
func (b *RankBuilder) Reset(ix *Index, r event.Rank) bool {
	if b.runs == nil {
		b.runs = new(runBuilder)
	}
	b.ix = ix
	if ix.runs != nil {
		return b.runs.reset(ix, r)
	}
	if rs := ix.rankOf(r); rs != nil && (rs.lookup.len() > 0 || len(rs.refs) > 0) {
		return false
	}
	b.runs.start(ix, r)
	return true
}

// Apply applies one device-tier event of the builder's rank as Index.Apply would, and counts
// it the same way (published by Commit). The event is not retained.
func (b *RankBuilder) Apply(ev *event.RouterEvent) Result { return b.runs.apply(ev) }

// Blocks returns the block hashes the rank holds so far.
func (b *RankBuilder) Blocks() int { return b.runs.held.n }

// Commit links the rank's final state into the tree: every held position and its ancestors,
// parents first, each found or created once under its shard lock; then the rank's lookup, sized
// once. An ancestor the rank does not hold (above a mid-chain removal) is pinned (one extra in
// its kids count, taken under its shard lock) until its child is linked, so a concurrent
// writer's reclaim cannot unlink it meanwhile. The counts of the applied events are published.
// Reset makes the builder ready for another rank.
func (b *RankBuilder) Commit() {
	rb := b.runs
	if b.ix.runs != nil {
		rb.commit()
		return
	}
	ix := b.ix
	defer rb.publishCounts()
	if !rb.register {
		return
	}
	rs := ix.register(rb.r)
	if rb.held.n == 0 {
		return
	}
	need := rb.markNeeded()
	nodes := append(b.nodes[:0], make([]nref, len(rb.pos))...)
	nodes[0] = rootRef
	pinned := b.pinned[:0]
	g := ix.ep.enter()
	defer ix.ep.exit(g)
	defer func() {
		clear(nodes)
		clear(pinned)
		b.nodes, b.pinned = nodes[:0], pinned[:0]
	}()
	defer ix.releaseMag(rs)
	var d deltas
	for i := 1; i < len(rb.pos); i++ {
		if !need[i] {
			continue
		}
		p := &rb.pos[i]
		n := ix.link(rs, nodes[p.parent], p.tokens, p.hash, p.holds > 0, &d)
		nodes[i] = n
		switch {
		case p.holds == 0:
			pinned = append(pinned, n)
		case p.holds > 1:
			if rs.refs == nil {
				rs.refs = make(map[nref]uint32)
			}
			rs.refs[n] = uint32(p.holds - 1)
		}
	}
	rs.lookup.reserve(rb.held.n)
	for _, sl := range rb.held.slots {
		if sl.p != 0 {
			rs.lookup.put(sl.h, nodes[sl.p-1])
		}
	}
	d.blocks += int64(rb.held.n)
	// Each pinned node has a linked child now (it is needed for a held descendant): dropping
	// the pin never leaves it childless.
	for _, n := range pinned {
		ix.at(n).kids.Add(-1)
	}
	ix.publish(rs, &d)
}

// link finds or creates the child of cur with tokens hash tok and, with hold, makes rank rs
// hold it (rs holds no node at that position yet); without hold it pins it (kids + 1). cur is
// held by rs, pinned, or the root, so it cannot be reclaimed meanwhile. Caller is in an epoch.
func (ix *Index) link(rs *rankEntry, cur nref, tok, hash uint64, hold bool, d *deltas) nref {
	cn := ix.at(cur)
	h := childHash(cur, tok)
	s := ix.shardOf(h)
	s.mu.Lock()
	var c nref
	var child *node
	if cn.kids.Load() != 0 {
		c, child = ix.find(ix.nodes.view(), s, cur, cn, tok, h)
	}
	switch {
	case c == 0:
		c, child = ix.makeNode(rs, cur, tok, hash)
		if hold {
			ix.addHolder(s, child, rs.id)
		} else {
			child.kids.Store(1)
		}
		ix.linkNode(s, cur, cn, c, h)
		d.nodes++
	case hold:
		ix.addHolder(s, child, rs.id)
	default:
		child.kids.Add(1)
	}
	s.mu.Unlock()
	return c
}
