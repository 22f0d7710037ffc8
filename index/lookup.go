package index

import "iter"

// lookup is a rank's block_hash → node map, owned by the rank's writer: open addressing with
// linear probing and backward-shift deletion (no tombstones), at most 4/5 full. A slot is 16
// bytes; key 0 marks an empty slot, so the block hash 0 is kept aside in zero.
type lookup struct {
	slots []lslot
	n     int   // entries in slots
	zero  *node // the node of block hash 0; nil when absent
}

type lslot struct {
	key uint64
	n   *node
}

// newLookup returns a lookup with room for capacity entries before it grows.
func newLookup(capacity int) lookup {
	if capacity <= 0 {
		return lookup{}
	}
	size := 8
	for 4*size < 5*capacity {
		size *= 2
	}
	return lookup{slots: make([]lslot, size)}
}

func lookupHash(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return k
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
	if len(m.slots) == 0 {
		return nil, false
	}
	mask := uint64(len(m.slots) - 1)
	for i := lookupHash(k) & mask; ; i = (i + 1) & mask {
		switch m.slots[i].key {
		case k:
			return m.slots[i].n, true
		case 0:
			return nil, false
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
	mask := uint64(len(m.slots) - 1)
	for i := lookupHash(k) & mask; ; i = (i + 1) & mask {
		switch m.slots[i].key {
		case k:
			m.slots[i].n = n
			return
		case 0:
			m.slots[i] = lslot{key: k, n: n}
			m.n++
			return
		}
	}
}

func (m *lookup) grow() {
	old := m.slots
	m.slots = make([]lslot, max(8, 2*len(old)))
	mask := uint64(len(m.slots) - 1)
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := lookupHash(s.key) & mask
		for m.slots[i].key != 0 {
			i = (i + 1) & mask
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
	if len(m.slots) == 0 {
		return nil, false
	}
	mask := uint64(len(m.slots) - 1)
	i := lookupHash(k) & mask
	for m.slots[i].key != k {
		if m.slots[i].key == 0 {
			return nil, false
		}
		i = (i + 1) & mask
	}
	n := m.slots[i].n
	// Backward shift: move each later entry of the run into the hole when the hole lies
	// between its home slot and its slot (cyclically), so no probe sequence is cut.
	for j := (i + 1) & mask; m.slots[j].key != 0; j = (j + 1) & mask {
		home := lookupHash(m.slots[j].key) & mask
		if (j-home)&mask >= (j-i)&mask {
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
