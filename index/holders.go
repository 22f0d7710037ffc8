package index

import (
	"sync/atomic"
	"unsafe"
)

// A holder set of two ranks or more is an immutable, length-prefixed array of rank ids: word 0
// is the count n, words 1..n the ids ascending. The owner points at word 0, so one set is one
// allocation and a reader gets a consistent set with one atomic load. A single holder is kept
// inline (one, id + 1; 0 for none), so a position held by one rank costs no allocation.
//
//	set ──► ┌───┬──────┬──────┬─────┬──────┐
//	        │ n │ id 1 │ id 2 │ ... │ id n │   uint32 each, n ≥ 2
//	        └───┴──────┴──────┴─────┴──────┘
//
// Writers order their stores so that a reader (load set; if nil, load one) sees the holders as
// before or after a change: growing from one holder to two publishes the set and leaves one as
// it was; shrinking from two to one stores one, then clears set. one is rewritten only while it
// describes the holders (set nil), or just before set is cleared.
//
// Package tier's edges keep the two words in their own layout, so the set is handled through
// these functions on the two words. The tree's nodes keep one holder word instead, naming the
// one holder or a slot of the holder set slab that holds the set (tree.go); they share
// setIDs, withID and withoutAt.

// HolderIDs returns the holder ids of (set, one), ascending; a single holder is returned in buf.
// The slice must not be modified. Safe without a lock.
func HolderIDs(set *atomic.Pointer[uint32], one *atomic.Uint32, buf *[1]uint32) []uint32 {
	if p := set.Load(); p != nil {
		return setIDs(p)
	}
	if v := one.Load(); v != 0 {
		buf[0] = v - 1
		return buf[:]
	}
	return nil
}

// SearchID returns the index of id in the ascending ids, or where it would be inserted.
func SearchID(ids []uint32, id uint32) (int, bool) {
	lo, hi := 0, len(ids)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ids[m] < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(ids) && ids[lo] == id
}

// AddHolder makes id a holder of (set, one). The caller serializes writers; id is absent.
func AddHolder(set *atomic.Pointer[uint32], one *atomic.Uint32, id uint32) {
	var buf [1]uint32
	old := HolderIDs(set, one, &buf)
	if len(old) == 0 {
		one.Store(id + 1)
		return
	}
	set.Store(withID(old, id))
}

// DropHolder removes id from (set, one) and reports whether no holder is left; false with ok
// false when id was not a holder (nothing changes). The caller serializes writers.
func DropHolder(set *atomic.Pointer[uint32], one *atomic.Uint32, id uint32) (empty, ok bool) {
	var buf [1]uint32
	old := HolderIDs(set, one, &buf)
	i, ok := SearchID(old, id)
	if !ok {
		return false, false
	}
	switch len(old) {
	case 1:
		one.Store(0)
		return true, true
	case 2:
		one.Store(old[1-i] + 1)
		set.Store(nil)
	default:
		set.Store(withoutAt(old, i))
	}
	return false, true
}

// setIDs returns the ids of the holder set at p.
func setIDs(p *uint32) []uint32 { return unsafe.Slice(p, int(*p)+1)[1:] }

// withID returns a new holder set: the ascending ids plus id (absent).
func withID(ids []uint32, id uint32) *uint32 {
	i, _ := SearchID(ids, id)
	s := make([]uint32, len(ids)+2)
	s[0] = uint32(len(ids) + 1)
	copy(s[1:], ids[:i])
	s[1+i] = id
	copy(s[2+i:], ids[i:])
	return &s[0]
}

// withoutAt returns a new holder set: the ascending ids (three or more) without ids[i].
func withoutAt(ids []uint32, i int) *uint32 {
	s := make([]uint32, len(ids))
	s[0] = uint32(len(ids) - 1)
	copy(s[1:], ids[:i])
	copy(s[1+i:], ids[i+1:])
	return &s[0]
}
