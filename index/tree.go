package index

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvindex/kvindex/event"
)

// node is one tree position: the path of tokens hashes from the root. tokens, parent and hash
// are immutable. holders and one are read by anyone without a lock and written by writers
// holding the node's shard lock; kids is atomic (see doc.go).
//
// 48 bytes (a size class): tokens, parent, first, holders, one, kids, hash.
type node struct {
	tokens  uint64
	parent  *node                  // nil for the root
	first   atomic.Pointer[node]   // n's first child, kept here instead of in the child table
	holders atomic.Pointer[uint32] // the holder set when two ranks or more hold n, else nil
	one     atomic.Uint32          // with holders nil: the only holder's id + 1, or 0 for none
	kids    atomic.Int32           // linked children; -1 once n is unlinked (dead)
	hash    uint64                 // the block hash n was created under (see lookup)
}

// The holder set (holders, one) is package-level (holders.go): one atomic load gives a reader a
// consistent set.

// holderIDs returns n's holder ids, ascending; a single holder is returned in buf. The slice
// must not be modified.
func (n *node) holderIDs(buf *[1]uint32) []uint32 { return HolderIDs(&n.holders, &n.one, buf) }

// heldBy reports whether rank id holds n. Caller holds n's shard lock.
func (n *node) heldBy(id uint32) bool {
	var buf [1]uint32
	_, ok := SearchID(n.holderIDs(&buf), id)
	return ok
}

// addHolder makes id a holder of n. Caller holds n's shard lock; id is absent.
func (n *node) addHolder(id uint32) { AddHolder(&n.holders, &n.one, id) }

// dropHolder removes id from n's holders. Caller holds n's shard lock; id is present.
func (n *node) dropHolder(id uint32) {
	if _, ok := DropHolder(&n.holders, &n.one, id); !ok {
		panic("index: rank released a node it does not hold")
	}
}

// reclaimable reports whether n can be unlinked: linked, no rank holds it and it has no
// children. Caller holds n's shard lock.
func (n *node) reclaimable() bool {
	return n.kids.Load() == 0 && n.holders.Load() == nil && n.one.Load() == 0
}

// numShards is the number of child-table shards (a power of two).
const numShards = 256

// shard is one stripe of the child table: every node whose (parent, tokens) hashes to it. mu
// serializes writers on the shard's nodes (table slots, holders, the dead mark); readers load
// tab and its slots with atomics and never take mu.
type shard struct {
	mu   sync.Mutex
	tab  atomic.Pointer[table]
	live int // linked nodes in tab; guarded by mu
	used int // non-nil slots (live and tombstones); guarded by mu
	_    [32]byte
}

// table is an open-addressing (linear probing) set of nodes keyed by (parent, tokens). A slot
// goes nil → node → tombstone (→ node again, reused by an insert) and never back to nil, so a
// reader's probe sequence is never cut short; growing builds a new table (dropping tombstones)
// and swaps it in, so a reader on the old table sees the tree as before the swap.
type table struct {
	mask  uint64
	slots []atomic.Pointer[node]
}

// childHash hashes a child's key (parent node, tokens hash). Nodes are heap objects that never
// move, so the parent's address identifies it.
func childHash(parent *node, tokens uint64) uint64 {
	h := uint64(uintptr(unsafe.Pointer(parent)))*0x9e3779b97f4a7c15 ^ tokens
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func (ix *Index) shardOf(h uint64) *shard { return &ix.shards[h>>(64-8)] }

// child returns the linked child of parent with tokens hash tok, or nil. It takes no lock: it
// may run concurrently with writers (see table).
func (ix *Index) child(parent *node, tok uint64) *node {
	if parent.kids.Load() <= 0 {
		return nil // a leaf (or dead); or a child is being linked: the tree as before
	}
	if c := parent.first.Load(); c != nil && c.tokens == tok {
		return c
	}
	h := childHash(parent, tok)
	t := ix.shardOf(h).tab.Load()
	if t == nil {
		return nil
	}
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		n := t.slots[i].Load()
		if n == nil {
			return nil
		}
		if n != ix.tomb && n.parent == parent && n.tokens == tok {
			return n
		}
	}
}

// find is child for a caller holding the shard's lock.
func (s *shard) find(tomb, parent *node, tok uint64, h uint64) *node {
	t := s.tab.Load()
	if t == nil {
		return nil
	}
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		n := t.slots[i].Load()
		if n == nil {
			return nil
		}
		if n != tomb && n.parent == parent && n.tokens == tok {
			return n
		}
	}
}

// insert links n (absent) into the shard. Caller holds s.mu. The table is kept at most 3/4
// full, tombstones included, so every probe sequence ends at a nil slot.
func (s *shard) insert(tomb, n *node, h uint64) {
	t := s.tab.Load()
	if t == nil || 4*(s.used+1) > 3*len(t.slots) {
		t = s.rebuild(tomb, t)
	}
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		switch c := t.slots[i].Load(); c {
		case nil:
			s.used++
			fallthrough
		case tomb:
			t.slots[i].Store(n)
			s.live++
			return
		}
	}
}

// rebuild publishes a fresh table sized for twice the live nodes (at least 8 slots) holding
// the live nodes of old. Caller holds s.mu.
func (s *shard) rebuild(tomb *node, old *table) *table {
	size := 8
	for size < 2*(s.live+1) {
		size *= 2
	}
	t := &table{mask: uint64(size - 1), slots: make([]atomic.Pointer[node], size)}
	if old != nil {
		for i := range old.slots {
			n := old.slots[i].Load()
			if n == nil || n == tomb {
				continue
			}
			for j := childHash(n.parent, n.tokens) & t.mask; ; j = (j + 1) & t.mask {
				if t.slots[j].Load() == nil {
					t.slots[j].Store(n)
					break
				}
			}
		}
	}
	s.used = s.live
	s.tab.Store(t)
	return t
}

// remove unlinks n from the shard. Caller holds s.mu; n is linked.
func (s *shard) remove(tomb, n *node, h uint64) {
	t := s.tab.Load()
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		if t.slots[i].Load() == n {
			t.slots[i].Store(tomb)
			s.live--
			return
		}
	}
}

// attach makes rank rs hold block b under cur (a node rs holds, or the root) and returns b's node
// and whether it was created. A block hash rs already holds elsewhere moves to the new position.
func (ix *Index) attach(rs *rankState, cur *node, b event.Block, d *deltas) *node {
	old, had := rs.lookup.get(b.BlockHash)
	if had {
		if c := ix.child(cur, b.TokensHash); c == old {
			return c // idempotent re-store: old is held by rs, hence linked
		}
	}
	h := childHash(cur, b.TokensHash)
	s := ix.shardOf(h)
	s.mu.Lock()
	// A linked child of cur counts in cur.kids from its insertion to its unlinking, both under
	// this shard's lock: with kids at 0 there is none to find (a fresh chain's usual case).
	var child *node
	if cur.kids.Load() != 0 {
		if c := cur.first.Load(); c != nil && c.tokens == b.TokensHash {
			child = c
		} else {
			child = s.find(ix.tomb, cur, b.TokensHash, h)
		}
	}
	if child == nil {
		child = &node{tokens: b.TokensHash, parent: cur, hash: b.BlockHash}
		child.addHolder(rs.id)
		if !cur.first.CompareAndSwap(nil, child) {
			s.insert(ix.tomb, child, h)
		}
		// cur cannot be reclaimed meanwhile: rs holds it (or it is the root).
		cur.kids.Add(1)
		d.nodes++
	} else if child.heldBy(rs.id) {
		if rs.refs == nil {
			rs.refs = make(map[*node]uint32)
		}
		rs.refs[child]++ // a second block hash of rs at this position
	} else {
		child.addHolder(rs.id)
	}
	s.mu.Unlock()

	rs.lookup.put(b.BlockHash, child)
	if ix.opts.Evictable && !had {
		ix.noteStored(rs, b.BlockHash)
	}
	if had {
		ix.release(rs, old, d)
	} else {
		d.blocks++
	}
	return child
}

// release drops one of rank rs's block hashes at n. When it was the last, rs leaves n, and n
// (then its ancestors) is unlinked when nobody holds it and it has no children.
func (ix *Index) release(rs *rankState, n *node, d *deltas) {
	if c, ok := rs.refs[n]; ok {
		if c > 1 {
			rs.refs[n] = c - 1
		} else {
			delete(rs.refs, n)
		}
		return
	}
	h := childHash(n.parent, n.tokens)
	s := ix.shardOf(h)
	s.mu.Lock()
	n.dropHolder(rs.id)
	unlinked := n.reclaimable()
	if unlinked {
		ix.unlink(s, n, h)
	}
	s.mu.Unlock()
	if unlinked {
		d.nodes--
		ix.reclaimUp(n.parent, d)
	}
}

// unlink removes n from the tree (its parent's first-child slot, or else the child table s) and
// marks it dead. Caller holds s.mu, n's shard lock; n is reclaimable. Only n's own unlinking
// clears a first-child slot holding n, so that slot cannot change under the lock.
func (ix *Index) unlink(s *shard, n *node, h uint64) {
	if !n.parent.first.CompareAndSwap(n, nil) {
		s.remove(ix.tomb, n, h)
	}
	n.kids.Store(-1)
}

// reclaimUp records that a child of n was unlinked, then unlinks n and its ancestors for as long
// as they are reclaimable. Each step re-checks under the node's shard lock: meanwhile a writer
// holding n may have attached a child (n is then held, hence not reclaimable), or another
// writer's reclaim may have unlinked n (dead).
func (ix *Index) reclaimUp(n *node, d *deltas) {
	for n != ix.root {
		if n.kids.Add(-1) != 0 {
			return
		}
		h := childHash(n.parent, n.tokens)
		s := ix.shardOf(h)
		s.mu.Lock()
		ok := n.reclaimable()
		if ok {
			ix.unlink(s, n, h)
		}
		s.mu.Unlock()
		if !ok {
			return
		}
		d.nodes--
		n = n.parent
	}
	n.kids.Add(-1)
}

// deltas accumulates an event's changes to the index-wide counters, published once per event.
type deltas struct {
	nodes, blocks int64
}

func (ix *Index) publish(rs *rankState, d *deltas) {
	if d.nodes != 0 {
		ix.nodes.Add(d.nodes)
	}
	if d.blocks != 0 {
		ix.blocks.Add(d.blocks)
		rs.blocks.Add(uint64(d.blocks))
	}
	*d = deltas{}
}
