package tier

import (
	"sync"
	"sync/atomic"

	"github.com/kvindex/kvindex/index"
)

// edge is one continuation edge of a tier: (parent block hash, or the root) + tokens hash →
// child block hash, with the ranks that hold it. parent, tokens, child and root are immutable;
// holders and one are read by anyone without a lock and written under the edge's shard lock.
//
// 48 bytes (a size class): parent, tokens, child, holders, one, root.
type edge struct {
	parent  uint64
	tokens  uint64
	child   uint64
	holders atomic.Pointer[uint32] // the holder set when two ranks or more hold the edge, else nil
	one     atomic.Uint32          // with holders nil: the only holder's id + 1, or 0 for none
	root    bool                   // the edge hangs under the root (parent is then 0)
}

// The holder set (holders, one) is package index's (index/holders.go): one atomic load gives a
// reader a consistent set, a single holder is kept inline.

// holderIDs returns e's holder ids, ascending; a single holder is returned in buf.
func (e *edge) holderIDs(buf *[1]uint32) []uint32 { return index.HolderIDs(&e.holders, &e.one, buf) }

// addHolder makes id a holder of e. Caller holds e's shard lock; id is absent.
func (e *edge) addHolder(id uint32) { index.AddHolder(&e.holders, &e.one, id) }

// dropHolder removes id from e's holders and reports whether e is left without holders. Caller
// holds e's shard lock; id is present.
func (e *edge) dropHolder(id uint32) bool {
	empty, ok := index.DropHolder(&e.holders, &e.one, id)
	if !ok {
		panic("tier: rank released an edge it does not hold")
	}
	return empty
}

// numShards is the number of edge-table shards (a power of two).
const numShards = 64

// shard is one stripe of a tier's edge table. mu serializes writers (slots, holders); readers
// load tab and its slots with atomics and never take mu.
type shard struct {
	mu   sync.Mutex
	tab  atomic.Pointer[table]
	live int // edges in tab; guarded by mu
	used int // non-nil slots (live and tombstones); guarded by mu
	_    [32]byte
}

// table is an open-addressing (linear probing) set of edges keyed by (root, parent, tokens). A
// slot goes nil → edge → tombstone (→ edge) and never back to nil, so a reader's probe is never
// cut short; growing builds a new table and swaps it in (index/tree.go's scheme).
type table struct {
	mask  uint64
	slots []atomic.Pointer[edge]
}

// tomb marks a slot whose edge was removed.
var tomb = &edge{}

// edgeHash hashes an edge key.
func edgeHash(root bool, parent, tokens uint64) uint64 {
	h := parent*0x9e3779b97f4a7c15 ^ tokens
	if root {
		h = ^h
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func (e *edge) is(root bool, parent, tokens uint64) bool {
	return e.tokens == tokens && e.parent == parent && e.root == root
}

// find returns the edge with the key, or nil. It takes no lock.
func (t *table) find(h uint64, root bool, parent, tokens uint64) *edge {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := t.slots[i].Load()
		if e == nil {
			return nil
		}
		if e != tomb && e.is(root, parent, tokens) {
			return e
		}
	}
}

// insert links e (absent). Caller holds s.mu. The table is kept at most 3/4 full, tombstones
// included, so every probe ends at a nil slot.
func (s *shard) insert(e *edge, h uint64) {
	t := s.tab.Load()
	if t == nil || 4*(s.used+1) > 3*len(t.slots) {
		t = s.rebuild(t)
	}
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		switch c := t.slots[i].Load(); c {
		case nil:
			s.used++
			fallthrough
		case tomb:
			t.slots[i].Store(e)
			s.live++
			return
		}
	}
}

// rebuild publishes a fresh table sized for twice the live edges (at least 8 slots) holding the
// live edges of old. Caller holds s.mu.
func (s *shard) rebuild(old *table) *table {
	size := 8
	for size < 2*(s.live+1) {
		size *= 2
	}
	t := &table{mask: uint64(size - 1), slots: make([]atomic.Pointer[edge], size)}
	if old != nil {
		for i := range old.slots {
			e := old.slots[i].Load()
			if e == nil || e == tomb {
				continue
			}
			for j := edgeHash(e.root, e.parent, e.tokens) & t.mask; ; j = (j + 1) & t.mask {
				if t.slots[j].Load() == nil {
					t.slots[j].Store(e)
					break
				}
			}
		}
	}
	s.used = s.live
	s.tab.Store(t)
	return t
}

// remove unlinks e. Caller holds s.mu; e is linked.
func (s *shard) remove(e *edge, h uint64) {
	t := s.tab.Load()
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		if t.slots[i].Load() == e {
			t.slots[i].Store(tomb)
			s.live--
			return
		}
	}
}
