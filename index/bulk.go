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
	r  event.Rank
	// pos are the positions the rank's events reached, parents before children (a position is
	// made under one that exists): pos[0] is the root.
	pos []rbPos
	// at interns a position by its path step (parent position, tokens hash): the run builder's
	// table (runs_bulk.go), every position in it.
	at rbForks
	// held is the rank's lookup: block hash → position.
	held map[uint64]int32
	// register: a Stored that makes the rank known was applied (Index.applyStored).
	register bool
	counts   [4][4]uint64
	// Commit's scratch, kept for the next rank.
	need   []bool
	nodes  []nref
	pinned []nref
	// runs is the builder of an index on the run layout (runs_bulk.go), kept for the next rank.
	runs *runBuilder
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
	if ix.runs != nil {
		if b.runs == nil {
			b.runs = new(runBuilder)
		}
		b.ix = ix
		return b.runs.reset(ix, r)
	}
	if rs := ix.rankOf(r); rs != nil && (rs.lookup.len() > 0 || len(rs.refs) > 0) {
		return false
	}
	b.ix, b.r, b.register, b.counts = ix, r, false, [4][4]uint64{}
	if b.held == nil {
		b.held = make(map[uint64]int32)
		b.at.slots = make([]int32, 64)
	}
	b.clear()
	return true
}

// Apply applies one device-tier event of the builder's rank as Index.Apply would, and counts
// it the same way (published by Commit). The event is not retained.
func (b *RankBuilder) Apply(ev *event.RouterEvent) Result {
	if b.ix.runs != nil {
		return b.runs.apply(ev)
	}
	var res Result
	switch ev.Kind {
	case event.KindStored:
		res = b.stored(ev)
	case event.KindRemoved:
		res = b.removed(ev)
	case event.KindCleared:
		b.clear()
	default:
		return Result{Status: StatusInvalidBlock}
	}
	if int(ev.Kind) < len(b.counts) {
		b.counts[ev.Kind][res.Status]++
	}
	return res
}

func (b *RankBuilder) stored(ev *event.RouterEvent) Result {
	for i, blk := range ev.Blocks {
		if ev.HasParent && blk.BlockHash == ev.ParentHash {
			return Result{Status: StatusInvalidBlock}
		}
		if i > 0 && blk.BlockHash == ev.Blocks[i-1].BlockHash {
			return Result{Status: StatusInvalidBlock}
		}
	}
	cur := int32(0)
	if ev.HasParent {
		p, ok := b.held[ev.ParentHash]
		if !ok {
			return Result{Status: StatusParentNotFound}
		}
		cur = p
	}
	b.register = true
	for _, blk := range ev.Blocks {
		child, slot := b.at.find(b.pos, cur, blk.TokensHash)
		old, had := b.held[blk.BlockHash]
		if had && child == old {
			cur = old // idempotent re-store
			continue
		}
		if child < 0 {
			child = int32(len(b.pos))
			b.pos = append(b.pos, rbPos{parent: cur, tokens: blk.TokensHash, hash: blk.BlockHash})
			b.at.add(b.pos, child, slot)
		}
		if b.pos[child].holds++; b.pos[child].holds == 1 {
			b.pos[child].hash = blk.BlockHash // the lookup keeps a node's own hash inline
		}
		b.held[blk.BlockHash] = child
		if had {
			b.pos[old].holds-- // the hash moved: the rank leaves its old position
		}
		cur = child
	}
	return Result{Status: StatusOK, Blocks: len(ev.Blocks)}
}

func (b *RankBuilder) removed(ev *event.RouterEvent) Result {
	res := Result{}
	for _, h := range ev.Removed {
		p, ok := b.held[h]
		if !ok {
			res.NotFound++
			continue
		}
		delete(b.held, h)
		b.pos[p].holds--
		res.Blocks++
	}
	if res.NotFound > 0 {
		res.Status = StatusBlockNotFound
	}
	return res
}

// clear drops every block: no position is held, so none is needed any more.
func (b *RankBuilder) clear() {
	clear(b.held)
	b.at.rebuild(b.pos, len(b.at.slots), func(func(int32)) {})
	b.pos = append(b.pos[:0], rbPos{parent: -1})
}

// Blocks returns the block hashes the rank holds so far.
func (b *RankBuilder) Blocks() int {
	if b.ix.runs != nil {
		return b.runs.held.n
	}
	return len(b.held)
}

// Commit links the rank's final state into the tree: every held position and its ancestors,
// parents first, each found or created once under its shard lock; then the rank's lookup, sized
// once. An ancestor the rank does not hold (above a mid-chain removal) is pinned (one extra in
// its kids count, taken under its shard lock) until its child is linked, so a concurrent
// writer's reclaim cannot unlink it meanwhile. The counts of the applied events are published.
// Reset makes the builder ready for another rank.
func (b *RankBuilder) Commit() {
	if b.ix.runs != nil {
		b.runs.commit()
		return
	}
	ix := b.ix
	defer b.publishCounts()
	if !b.register {
		return
	}
	rs := ix.register(b.r)
	if len(b.held) == 0 {
		return
	}
	need := b.need[:0]
	need = append(need, make([]bool, len(b.pos))...)
	need[0] = true
	for i := range b.pos {
		if b.pos[i].holds == 0 {
			continue
		}
		for p := int32(i); !need[p]; p = b.pos[p].parent {
			need[p] = true
		}
	}
	nodes := append(b.nodes[:0], make([]nref, len(b.pos))...)
	nodes[0] = rootRef
	pinned := b.pinned[:0]
	g := ix.ep.enter()
	defer ix.ep.exit(g)
	defer func() {
		clear(nodes)
		clear(pinned)
		b.need, b.nodes, b.pinned = need, nodes[:0], pinned[:0]
	}()
	defer ix.releaseMag(rs)
	var d deltas
	for i := 1; i < len(b.pos); i++ {
		if !need[i] {
			continue
		}
		p := &b.pos[i]
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
	rs.lookup.reserve(len(b.held))
	for h, p := range b.held {
		rs.lookup.put(h, nodes[p])
	}
	d.blocks += int64(len(b.held))
	// Each pinned node has a linked child now (it is needed for a held descendant): dropping
	// the pin never leaves it childless.
	for _, n := range pinned {
		ix.at(n).kids.Add(-1)
	}
	ix.publish(rs, &d)
}

func (b *RankBuilder) publishCounts() {
	for k := range b.counts {
		for s, c := range b.counts[k] {
			if c > 0 {
				b.ix.counts[k][s].Add(c)
			}
		}
	}
	b.counts = [4][4]uint64{}
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
