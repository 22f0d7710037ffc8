package index

import (
	"sort"
	"sync"

	"github.com/kvindex/kvindex/event"
)

// holder records that a rank holds a node, and through how many of its block hashes (a rank may
// store two block hashes with the same position; it holds the node until both are gone).
type holder struct {
	id   uint32 // dense rank id
	refs uint32
}

// node is one tree position: the path of tokens hashes from the root. tokens and parent are
// immutable; the rest is guarded by mu.
type node struct {
	tokens uint64
	parent *node // nil for the root

	mu       sync.RWMutex
	children map[uint64]*node // tokens_hash → child; nil when empty
	holders  []holder         // sorted by id; a node is held while len(holders) > 0
	dead     bool             // unlinked from its parent; never linked again
}

// find returns the index of id in holders, or where it would be inserted.
func (n *node) find(id uint32) (int, bool) {
	i := sort.Search(len(n.holders), func(i int) bool { return n.holders[i].id >= id })
	return i, i < len(n.holders) && n.holders[i].id == id
}

func (n *node) addHolder(id uint32) {
	i, ok := n.find(id)
	if ok {
		n.holders[i].refs++
		return
	}
	n.holders = append(n.holders, holder{})
	copy(n.holders[i+1:], n.holders[i:])
	n.holders[i] = holder{id: id, refs: 1}
}

func (n *node) dropHolder(id uint32) {
	i, ok := n.find(id)
	if !ok {
		panic("index: rank released a node it does not hold")
	}
	if n.holders[i].refs > 1 {
		n.holders[i].refs--
		return
	}
	n.holders = append(n.holders[:i], n.holders[i+1:]...)
	if len(n.holders) == 0 {
		n.holders = nil
	}
}

// reclaimable reports whether n can be unlinked: no rank holds it and it has no children.
// Caller holds n.mu.
func (n *node) reclaimable() bool {
	return !n.dead && len(n.holders) == 0 && len(n.children) == 0
}

// unlink removes n from its parent. Caller holds p.mu and n.mu for writing.
func (ix *Index) unlink(p, n *node) {
	delete(p.children, n.tokens)
	if len(p.children) == 0 {
		p.children = nil
	}
	n.dead = true
	ix.nodes.Add(-1)
}

// attach makes rank rs hold block b under cur (a node rs holds, or the root) and returns b's node.
// A block hash rs already holds elsewhere moves to the new position.
func (ix *Index) attach(rs *rankState, cur *node, b event.Block) *node {
	old := rs.lookup[b.BlockHash]
	cur.mu.Lock()
	child := cur.children[b.TokensHash]
	if child == nil {
		child = &node{tokens: b.TokensHash, parent: cur}
		if cur.children == nil {
			cur.children = make(map[uint64]*node, 1)
		}
		cur.children[b.TokensHash] = child
		ix.nodes.Add(1)
	} else if child == old {
		cur.mu.Unlock()
		return child // idempotent re-store
	}
	child.mu.Lock()
	child.addHolder(rs.id)
	child.mu.Unlock()
	cur.mu.Unlock()

	rs.lookup[b.BlockHash] = child
	if old != nil {
		ix.release(old, rs.id)
	} else {
		rs.blocks.Add(1)
		ix.blocks.Add(1)
	}
	return child
}

// release drops one reference of rank id on n, unlinking n (and then its ancestors) when nobody
// holds it and it has no children.
//
// n's parent stays linked throughout: n is linked under it until we unlink n ourselves.
func (ix *Index) release(n *node, id uint32) {
	p := n.parent
	p.mu.Lock()
	n.mu.Lock()
	n.dropHolder(id)
	unlinked := false
	if n.reclaimable() {
		ix.unlink(p, n)
		unlinked = true
	}
	n.mu.Unlock()
	p.mu.Unlock()
	if unlinked {
		ix.reclaimUp(p)
	}
}

// reclaimUp unlinks n and its ancestors for as long as they are reclaimable. Each step locks a
// parent and its child (in that order) afresh: between steps a writer may have attached a child
// under n, or another writer may have reclaimed it, and the re-check sees both.
func (ix *Index) reclaimUp(n *node) {
	for n != ix.root {
		p := n.parent
		p.mu.Lock()
		n.mu.Lock()
		ok := n.reclaimable()
		if ok {
			ix.unlink(p, n)
		}
		n.mu.Unlock()
		p.mu.Unlock()
		if !ok {
			return
		}
		n = p
	}
}
