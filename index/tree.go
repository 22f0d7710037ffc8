package index

import (
	"sync"
	"sync/atomic"

	"github.com/kvindex/kvindex/event"
)

// nref addresses a node in the index's node slab (slab.go). The root is 0; in a child table
// slot, 0 is empty and tomb marks a node that was unlinked; in a first-child slot 0 is none.
type nref = uint32

const (
	rootRef nref = 0
	tomb    nref = ^nref(0)
)

// node is one tree position: the path of tokens hashes from the root. tokens, parent and hash
// are set when the node is made and kept until it is unlinked; hold and first are read by anyone
// without a lock and written by writers holding the node's shard lock; kids is atomic (see
// doc.go). An unlinked node's slot is reused once no reader can reach it (slab.go).
//
// 32 bytes, no pointer: tokens, hash, parent, first, hold, kids.
type node struct {
	tokens uint64
	hash   uint64        // the block hash n was created under (see lookup)
	parent nref          // rootRef for the root's children (and the root itself)
	first  atomic.Uint32 // n's first child, kept here instead of in the child table; 0 for none
	hold   atomic.Uint32 // the holders: 0 none, id + 1 for one, setBit | set index for more
	kids   atomic.Int32  // linked children; -1 once n is unlinked (dead)
}

// setBit marks a holder word that names a holder set (ix.sets) rather than one rank.
const setBit = 1 << 31

// at returns node r.
func (ix *Index) at(r nref) *node { return ix.nodes.at(r) }

// holderIDs returns n's holder ids, ascending; a single holder is returned in buf. The slice
// must not be modified. Safe without a lock, inside an epoch.
func (ix *Index) holderIDs(n *node, buf *[1]uint32) []uint32 {
	w := n.hold.Load()
	switch {
	case w == 0:
		return nil
	case w < setBit:
		buf[0] = w - 1
		return buf[:]
	}
	return setIDs(ix.sets.at(w &^ setBit).Load())
}

// heldOnlyBy reports whether rank id is n's one holder: the holder word alone, no set read.
// Safe without a lock.
func heldOnlyBy(n *node, id uint32) bool { return n.hold.Load() == id+1 }

// heldBy reports whether rank id holds n. Caller holds n's shard lock.
func (ix *Index) heldBy(n *node, id uint32) bool {
	var buf [1]uint32
	_, ok := SearchID(ix.holderIDs(n, &buf), id)
	return ok
}

// addHolder makes id a holder of n. Caller holds s, n's shard lock; id is absent. A second
// holder takes a holder set slot from s; the set is then replaced whole in its slot, so a
// reader sees the holders as before or after (holders.go).
func (ix *Index) addHolder(s *shard, n *node, id uint32) {
	if id+1 >= setBit {
		panic("index: rank id beyond 2³¹−2")
	}
	w := n.hold.Load()
	switch {
	case w == 0:
		n.hold.Store(id + 1)
	case w < setBit:
		q, ok := s.sets.take(&ix.ep, ix.clearSet)
		if !ok {
			q = ix.sets.fresh()
		}
		ix.sets.at(q).Store(withID([]uint32{w - 1}, id)) // before the word that names it
		n.hold.Store(setBit | q)
	default:
		slot := ix.sets.at(w &^ setBit)
		slot.Store(withID(setIDs(slot.Load()), id))
	}
}

// dropHolder removes id from n's holders. Caller holds s, n's shard lock; id is present. From
// two holders to one, the set's slot keeps the old set (a reader that loaded the holder word
// before sees the holders as before) and goes to limbo.
func (ix *Index) dropHolder(s *shard, n *node, id uint32) {
	w := n.hold.Load()
	if w == id+1 {
		n.hold.Store(0)
		return
	}
	if w >= setBit {
		q := w &^ setBit
		slot := ix.sets.at(q)
		ids := setIDs(slot.Load())
		if i, ok := SearchID(ids, id); ok {
			if len(ids) == 2 {
				n.hold.Store(ids[1-i] + 1)
				s.sets.give(&ix.ep, q)
			} else {
				slot.Store(withoutAt(ids, i))
			}
			return
		}
	}
	panic("index: rank released a node it does not hold")
}

// clearSet drops what a reusable holder set slot still points at.
func (ix *Index) clearSet(q uint32) { ix.sets.at(q).Store(nil) }

// reclaimable reports whether n can be unlinked: linked, no rank holds it and it has no
// children. Caller holds n's shard lock.
func (n *node) reclaimable() bool { return n.kids.Load() == 0 && n.hold.Load() == 0 }

// numShards is the number of child-table shards (a power of two).
const numShards = 256

// shard is one stripe of the child table: every node whose (parent, tokens) hashes to it. mu
// serializes writers on the shard's nodes (table slots, holders, the dead mark, the reuse of
// holder set slots); readers load tab and its slots with atomics and never take mu.
type shard struct {
	mu   sync.Mutex
	tab  atomic.Pointer[table]
	live int  // linked nodes in tab; guarded by mu
	used int  // non-empty slots (live and tombstones); guarded by mu
	sets pool // holder set slots given back; guarded by mu
}

// table is an open-addressing (linear probing) set of nodes keyed by (parent, tokens). A slot
// goes 0 → node → tomb (→ node again, reused by an insert) and never back to 0, so a reader's
// probe sequence is never cut short; growing builds a new table (dropping tombstones) and swaps
// it in, so a reader on the old table sees the tree as before the swap.
//
// A slot is one 64-bit word, loaded and stored whole, so a reader never sees a tag without its
// node:
//
//	 63            32 31             0
//	┌────────────────┬────────────────┐
//	│ tag: h bits    │ nref           │   0: empty; nref tomb: unlinked
//	│ 24..55         │                │
//	└────────────────┴────────────────┘
//
// The tag is taken from bits of the key's hash that pick neither the shard (the top 8) nor,
// in any table below 2²⁴ slots, the slot, so candidates that only share a probe sequence are
// passed without loading their nodes.
type table struct {
	mask  uint64
	slots []atomic.Uint64
}

// slotTag returns the tag of a child's key hash h.
func slotTag(h uint64) uint32 { return uint32(h >> 24) }

// slotWord returns the table slot of node c, whose key hashes to h.
func slotWord(c nref, h uint64) uint64 { return uint64(slotTag(h))<<32 | uint64(c) }

// childHash hashes a child's key (parent node, tokens hash).
func childHash(parent nref, tokens uint64) uint64 {
	h := uint64(parent)*0x9e3779b97f4a7c15 ^ tokens
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func (ix *Index) shardOf(h uint64) *shard { return &ix.shards[h>>(64-8)] }

// child returns the linked child of parent p (node pn) with tokens hash tok, or 0. It takes no
// lock: it may run concurrently with writers (see table), inside an epoch.
func (ix *Index) child(nv view[node], p nref, pn *node, tok uint64) (nref, *node) {
	if pn.kids.Load() <= 0 {
		return 0, nil // a leaf (or dead); or a child is being linked: the tree as before
	}
	if c, cn := firstChild(nv, pn, tok); cn != nil {
		return c, cn // a chain's next block: no key hash, no table
	}
	h := childHash(p, tok)
	return ix.probe(nv, ix.shardOf(h), p, tok, h)
}

// find returns p's child with tokens hash tok (p's first child, or else from s, the shard of
// hash h of (p, tok)), or 0; p has children or is being given one. Safe without a lock, inside
// an epoch, or under s's lock.
func (ix *Index) find(nv view[node], s *shard, p nref, pn *node, tok uint64, h uint64) (nref, *node) {
	if c, cn := firstChild(nv, pn, tok); cn != nil {
		return c, cn
	}
	return ix.probe(nv, s, p, tok, h)
}

// firstChild returns pn's first child if its tokens hash is tok, else 0.
func firstChild(nv view[node], pn *node, tok uint64) (nref, *node) {
	if c := pn.first.Load(); c != 0 {
		if cn := nv.at(c); cn.tokens == tok {
			return c, cn
		}
	}
	return 0, nil
}

// probe returns p's child with tokens hash tok from s's table (the shard of hash h of (p, tok)),
// or 0. Safe as find is.
func (ix *Index) probe(nv view[node], s *shard, p nref, tok uint64, h uint64) (nref, *node) {
	t := s.tab.Load()
	if t == nil {
		return 0, nil
	}
	tag := slotTag(h)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		w := t.slots[i].Load()
		if w == 0 {
			return 0, nil
		}
		// The tag spares loading the node of every candidate the probe passes.
		if c := nref(w); c != tomb && uint32(w>>32) == tag {
			if cn := nv.at(c); cn.parent == p && cn.tokens == tok {
				return c, cn
			}
		}
	}
}

// insert links c (absent) into the shard. Caller holds s.mu. The table is kept at most 3/4
// full, tombstones included, so every probe sequence ends at an empty slot.
func (ix *Index) insert(s *shard, c nref, h uint64) {
	t := s.tab.Load()
	if t == nil || 4*(s.used+1) > 3*len(t.slots) {
		t = ix.rebuild(s, t)
	}
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		switch v := t.slots[i].Load(); {
		case v == 0:
			s.used++
			fallthrough
		case nref(v) == tomb:
			t.slots[i].Store(slotWord(c, h))
			s.live++
			return
		}
	}
}

// rebuild publishes a fresh table sized for twice the live nodes (at least 8 slots) holding
// the live nodes of old. Caller holds s.mu.
func (ix *Index) rebuild(s *shard, old *table) *table {
	size := 8
	for size < 2*(s.live+1) {
		size *= 2
	}
	t := &table{mask: uint64(size - 1), slots: make([]atomic.Uint64, size)}
	if old != nil {
		for i := range old.slots {
			w := old.slots[i].Load()
			c := nref(w)
			if w == 0 || c == tomb {
				continue
			}
			cn := ix.at(c)
			for j := childHash(cn.parent, cn.tokens) & t.mask; ; j = (j + 1) & t.mask {
				if t.slots[j].Load() == 0 {
					t.slots[j].Store(w)
					break
				}
			}
		}
	}
	s.used = s.live
	s.tab.Store(t)
	return t
}

// remove unlinks c from the shard's table. Caller holds s.mu; c is in the table.
func (s *shard) remove(c nref, h uint64) {
	t := s.tab.Load()
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		if nref(t.slots[i].Load()) == c {
			t.slots[i].Store(uint64(tomb))
			s.live--
			return
		}
	}
}

// makeNode returns a fresh node (tokens, hash) under parent p, not yet linked, from rank rs's
// slots (slab.go). Caller holds the shard lock of (p, tokens).
//
// The record is written whole with plain stores: no reader can reach a slot handed out
// (slab.go), and linking the node publishes it with an atomic store. (Storing its three
// atomic fields one by one, each a locked instruction on amd64, cost 4 % of a 2-writer apply.)
func (ix *Index) makeNode(rs *rankEntry, p nref, tokens, hash uint64) (nref, *node) {
	c := ix.takeNode(rs)
	cn := ix.at(c)
	*cn = node{tokens: tokens, hash: hash, parent: p}
	return c, cn
}

// linkNode links c, a fresh node, under p: as p's first child when that slot is free, else
// in s's table. Caller holds s.mu; p cannot be reclaimed meanwhile (it is held, pinned, or
// the root).
func (ix *Index) linkNode(s *shard, p nref, pn *node, c nref, h uint64) {
	if !pn.first.CompareAndSwap(0, c) {
		ix.insert(s, c, h)
	}
	pn.kids.Add(1)
}

// attach makes rank rs hold block b under cur (a node rs holds, or the root) and returns b's node.
// A block hash rs already holds elsewhere moves to the new position.
func (ix *Index) attach(rs *rankEntry, cur nref, b event.Block, d *deltas) nref {
	old, had := rs.lookup.get(b.BlockHash)
	cn := ix.at(cur)
	if had {
		if c, _ := ix.child(ix.nodes.view(), cur, cn, b.TokensHash); c == old {
			return c // idempotent re-store, found without a lock: old is held by rs, hence linked
		}
	}
	h := childHash(cur, b.TokensHash)
	s := ix.shardOf(h)
	s.mu.Lock()
	// A linked child of cur counts in cur.kids from its insertion to its unlinking, both under
	// this shard's lock: with kids at 0 there is none to find (a fresh chain's usual case).
	var c nref
	var child *node
	if cn.kids.Load() != 0 {
		c, child = ix.find(ix.nodes.view(), s, cur, cn, b.TokensHash, h)
	}
	switch {
	case c == 0:
		c, child = ix.makeNode(rs, cur, b.TokensHash, b.BlockHash)
		ix.addHolder(s, child, rs.id)
		ix.linkNode(s, cur, cn, c, h)
		d.nodes++
	case ix.heldBy(child, rs.id):
		if rs.refs == nil {
			rs.refs = make(map[nref]uint32)
		}
		rs.refs[c]++ // a second block hash of rs at this position
	default:
		ix.addHolder(s, child, rs.id)
	}
	s.mu.Unlock()

	rs.lookup.put(b.BlockHash, c)
	if ix.opts.Evictable && !had {
		ix.noteStored(rs, b.BlockHash)
	}
	if had {
		ix.release(rs, old, d)
	} else {
		d.blocks++
	}
	return c
}

// release drops one of rank rs's block hashes at n. When it was the last, rs leaves n, and n
// (then its ancestors) is unlinked when nobody holds it and it has no children.
func (ix *Index) release(rs *rankEntry, n nref, d *deltas) {
	if c, ok := rs.refs[n]; ok {
		if c > 1 {
			rs.refs[n] = c - 1
		} else {
			delete(rs.refs, n)
		}
		return
	}
	nn := ix.at(n)
	h := childHash(nn.parent, nn.tokens)
	s := ix.shardOf(h)
	s.mu.Lock()
	ix.dropHolder(s, nn, rs.id)
	parent := nn.parent
	unlinked := nn.reclaimable()
	if unlinked {
		ix.unlink(rs, s, n, nn, h)
	}
	s.mu.Unlock()
	if unlinked {
		d.nodes--
		ix.reclaimUp(rs, parent, d)
	}
}

// unlink removes n from the tree (its parent's first-child slot, or else the child table s),
// marks it dead and gives its slot back through rs, the rank whose writer unlinks it. Caller
// holds s.mu, n's shard lock; n is reclaimable. Only n's own unlinking clears a first-child slot
// holding n, so that slot cannot change under the lock.
func (ix *Index) unlink(rs *rankEntry, s *shard, n nref, nn *node, h uint64) {
	if !ix.at(nn.parent).first.CompareAndSwap(n, 0) {
		s.remove(n, h)
	}
	nn.kids.Store(-1)
	ix.giveNode(rs, n)
}

// reclaimUp records that a child of n was unlinked, then unlinks n and its ancestors for as long
// as they are reclaimable. Each step re-checks under the node's shard lock: meanwhile a writer
// holding n may have attached a child (n is then held, hence not reclaimable), or another
// writer's reclaim may have unlinked n (dead; its index is not reused while this writer is in
// its epoch).
func (ix *Index) reclaimUp(rs *rankEntry, n nref, d *deltas) {
	for n != rootRef {
		nn := ix.at(n)
		if nn.kids.Add(-1) != 0 {
			return
		}
		h := childHash(nn.parent, nn.tokens)
		s := ix.shardOf(h)
		s.mu.Lock()
		parent := nn.parent
		ok := nn.reclaimable()
		if ok {
			ix.unlink(rs, s, n, nn, h)
		}
		s.mu.Unlock()
		if !ok {
			return
		}
		d.nodes--
		n = parent
	}
	ix.at(rootRef).kids.Add(-1)
}

// deltas accumulates an event's changes to the index-wide counters, published once per event.
type deltas struct {
	nodes, blocks int64
}

func (ix *Index) publish(rs *rankEntry, d *deltas) {
	if d.nodes != 0 {
		ix.nodeCount.Add(d.nodes)
	}
	if d.blocks != 0 {
		ix.blocks.Add(d.blocks)
		rs.blocks.Add(uint64(d.blocks))
	}
	*d = deltas{}
}
