package index

import (
	"iter"
	"math/bits"
)

// lookup is a rank's block_hash → node map, owned by the rank's writer: open addressing with
// linear probing and backward-shift deletion (no tombstones), at most 4/5 full. A slot is 16
// bytes; key 0 marks an empty slot, so the block hash 0 is kept aside in zero.
//
// The table grows by half (not doubling) and its size need not be a power of two (a key's
// home slot is the high word of hash × size): a rank capped at 512 blocks, a common cache
// size, ends 3/4 full in 681 slots instead of 1/2 full in 1,024, which saves 10 bytes per
// (rank, block) entry.
type lookup struct {
	slots []lslot
	n     int   // entries in slots
	zero  *node // the node of block hash 0; nil when absent
}

type lslot struct {
	key uint64
	n   *node
}

// minLookup is the size of a lookup's first table.
const minLookup = 8

// newLookup returns a lookup with room for capacity entries before it grows.
func newLookup(capacity int) lookup {
	if capacity <= 0 {
		return lookup{}
	}
	return lookup{slots: make([]lslot, max(minLookup, (5*capacity+3)/4))}
}

// home returns the first slot of k's probe sequence in a table of size slots.
func home(k uint64, size int) int {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	hi, _ := bits.Mul64(k, uint64(size))
	return int(hi)
}

// len returns the number of entries.
func (m *lookup) len() int {
	if m.zero != nil {
		return m.n + 1
	}
	return m.n
}

// get returns the node of block hash k.
func (m *lookup) get(k uint64) (*node, bool) {
	if k == 0 {
		return m.zero, m.zero != nil
	}
	size := len(m.slots)
	if size == 0 {
		return nil, false
	}
	for i := home(k, size); ; {
		switch m.slots[i].key {
		case k:
			return m.slots[i].n, true
		case 0:
			return nil, false
		}
		if i++; i == size {
			i = 0
		}
	}
}

// put maps block hash k to n (non-nil), replacing any previous node.
func (m *lookup) put(k uint64, n *node) {
	if k == 0 {
		m.zero = n
		return
	}
	if 5*(m.n+1) > 4*len(m.slots) {
		m.grow()
	}
	size := len(m.slots)
	for i := home(k, size); ; {
		switch m.slots[i].key {
		case k:
			m.slots[i].n = n
			return
		case 0:
			m.slots[i] = lslot{key: k, n: n}
			m.n++
			return
		}
		if i++; i == size {
			i = 0
		}
	}
}

func (m *lookup) grow() {
	old := m.slots
	size := max(minLookup, len(old)+len(old)/2)
	m.slots = make([]lslot, size)
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := home(s.key, size)
		for m.slots[i].key != 0 {
			if i++; i == size {
				i = 0
			}
		}
		m.slots[i] = s
	}
}

// del removes block hash k and returns its node.
func (m *lookup) del(k uint64) (*node, bool) {
	if k == 0 {
		n := m.zero
		m.zero = nil
		return n, n != nil
	}
	size := len(m.slots)
	if size == 0 {
		return nil, false
	}
	i := home(k, size)
	for m.slots[i].key != k {
		if m.slots[i].key == 0 {
			return nil, false
		}
		if i++; i == size {
			i = 0
		}
	}
	n := m.slots[i].n
	// Backward shift: move each later entry of the run into the hole when the hole lies
	// between its home slot and its slot (cyclically), so no probe sequence is cut.
	dist := func(from, to int) int { // cyclic distance from slot from forward to slot to
		if to >= from {
			return to - from
		}
		return to + size - from
	}
	for j := i; ; {
		if j++; j == size {
			j = 0
		}
		if m.slots[j].key == 0 {
			break
		}
		if dist(home(m.slots[j].key, size), j) >= dist(i, j) {
			m.slots[i] = m.slots[j]
			i = j
		}
	}
	m.slots[i] = lslot{}
	m.n--
	return n, true
}

// all yields every (block hash, node) entry, in no particular order. The lookup must not be
// modified meanwhile.
func (m *lookup) all() iter.Seq2[uint64, *node] {
	return func(yield func(uint64, *node) bool) {
		if m.zero != nil && !yield(0, m.zero) {
			return
		}
		for _, s := range m.slots {
			if s.key != 0 && !yield(s.key, s.n) {
				return
			}
		}
	}
}
