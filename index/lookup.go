package index

import (
	"iter"
	"math/bits"
)

// lookup is a rank's block_hash → node map, owned by the rank's writer.
//
// Nearly every entry maps a block hash to a node created under that very hash (node.hash): the
// ranks holding one position name it with the same chained sequence hash (event.BlockHashes). Such an
// entry is stored as the bare node index, its key read back from the node, in an open-
// addressing table with linear probing and backward-shift deletion (no tombstones), at most
// 4/5 full. Any other entry (a rank naming a shared position with its own hash, or a second
// block hash of the rank at one position) goes to the other map; the block hash 0 is kept in
// zero.
//
// A slot is 6 bytes: the node index and a 2-byte tag, 0 for an empty slot, else the entry's
// displacement (how far past its home slot it sits, 255 for 255 or more) and a fingerprint
// (0x80 | 7 bits of the key's hash). Fingerprints settle most probe steps without loading the
// node; displacements let a deletion shift entries back without loading theirs.
//
//	tags   ┌──────┬──────┬─────┐    nodes ┌────────┬────────┬─────┐
//	       │ tag0 │ tag1 │ ... │          │ nref   │ nref   │ ... │   slot i: tags[i], nodes[i]
//	       └──────┴──────┴─────┘          └────────┴────────┴─────┘
//	tag    ┌──────────────┬────────────────────┐
//	       │ displacement │ 1 │ fingerprint(7) │   8 bits each
//	       └──────────────┴────────────────────┘
//
// The table grows by half (not doubling) and its size need not be a power of two (a key's home
// slot is the high word of hash × size): a rank capped at 512 blocks, a common cache size, ends
// 3/4 full in 681 slots instead of 1/2 full in 1,024.
type lookup struct {
	st    *slab[node] // where the nodes are
	tags  []uint16
	nodes []nref
	n     int             // entries in the table
	other map[uint64]nref // entries whose node's hash is not their key; nil when none
	zero  nref            // the node of block hash 0; 0 when absent (the root is in no lookup)
}

// minLookup is the size of a lookup's first table.
const minLookup = 8

// newLookup returns a lookup with room for capacity entries before it grows.
func newLookup(st *slab[node], capacity int) lookup {
	if capacity <= 0 {
		return lookup{st: st}
	}
	size := max(minLookup, (5*capacity+3)/4)
	return lookup{st: st, tags: make([]uint16, size), nodes: make([]nref, size)}
}

// hash returns the block hash node c was created under.
func (m *lookup) hash(c nref) uint64 { return m.st.at(c).hash }

// slotOf returns the home slot of key k in a table of size slots, and k's fingerprint.
func slotOf(k uint64, size int) (int, uint16) {
	k = mix64(k)
	hi, _ := bits.Mul64(k, uint64(size))
	return int(hi), 0x80 | uint16(k&0x7f)
}

// maxDisp is the largest displacement a tag holds; an entry at maxDisp or more has its home
// slot computed from its node's hash.
const maxDisp = 255

func withDisp(fp uint16, d int) uint16 { return uint16(min(d, maxDisp))<<8 | fp }

// len returns the number of entries.
func (m *lookup) len() int {
	n := m.n + len(m.other)
	if m.zero != 0 {
		n++
	}
	return n
}

// find returns the slot of key k in the table, or -1.
func (m *lookup) find(k uint64) int {
	size := len(m.tags)
	if size == 0 {
		return -1
	}
	i, fp := slotOf(k, size)
	for {
		switch t := m.tags[i]; {
		case t == 0:
			return -1
		case t&0xff == fp && m.hash(m.nodes[i]) == k:
			return i
		}
		if i++; i == size {
			i = 0
		}
	}
}

// get returns the node of block hash k.
func (m *lookup) get(k uint64) (nref, bool) {
	if k == 0 {
		return m.zero, m.zero != 0
	}
	if i := m.find(k); i >= 0 {
		return m.nodes[i], true
	}
	if m.other != nil {
		n, ok := m.other[k]
		return n, ok
	}
	return 0, false
}

// put maps block hash k to n (not the root), replacing any previous node.
func (m *lookup) put(k uint64, n nref) {
	if k == 0 {
		m.zero = n
		return
	}
	if m.hash(n) != k {
		if i := m.find(k); i >= 0 {
			m.removeAt(i)
		}
		if m.other == nil {
			m.other = make(map[uint64]nref)
		}
		m.other[k] = n
		return
	}
	if m.other != nil {
		delete(m.other, k)
	}
	if i := m.find(k); i >= 0 {
		m.nodes[i] = n
		return
	}
	if 5*(m.n+1) > 4*len(m.tags) {
		m.grow()
	}
	m.insert(k, n)
}

// insert puts n, under key k (absent, n's hash == k), in the table, which has room.
func (m *lookup) insert(k uint64, n nref) {
	size := len(m.tags)
	i, fp := slotOf(k, size)
	d := 0
	for m.tags[i] != 0 {
		if i++; i == size {
			i = 0
		}
		d++
	}
	m.tags[i], m.nodes[i] = withDisp(fp, d), n
	m.n++
}

func (m *lookup) grow() { m.resize(max(minLookup, len(m.tags)+len(m.tags)/2)) }

// reserve makes room for capacity entries, so that many puts do not grow the table step by step.
func (m *lookup) reserve(capacity int) {
	if size := (5*capacity + 3) / 4; size > len(m.tags) {
		m.resize(max(minLookup, size))
	}
}

// resize rehashes the table into size slots (size > m.n).
func (m *lookup) resize(size int) {
	tags, nodes := m.tags, m.nodes
	m.tags, m.nodes, m.n = make([]uint16, size), make([]nref, size), 0
	for i, t := range tags {
		if t != 0 {
			m.insert(m.hash(nodes[i]), nodes[i])
		}
	}
}

// del removes block hash k and returns its node.
func (m *lookup) del(k uint64) (nref, bool) {
	if k == 0 {
		n := m.zero
		m.zero = 0
		return n, n != 0
	}
	if i := m.find(k); i >= 0 {
		n := m.nodes[i]
		m.removeAt(i)
		return n, true
	}
	if n, ok := m.other[k]; ok {
		delete(m.other, k)
		return n, true
	}
	return 0, false
}

// removeAt empties table slot i. Backward shift: each later entry of the run moves into the
// hole when the hole lies between its home slot and its slot (cyclically), so no probe
// sequence is cut.
func (m *lookup) removeAt(i int) {
	size := len(m.tags)
	for j := i; ; {
		if j++; j == size {
			j = 0
		}
		t := m.tags[j]
		if t == 0 {
			break
		}
		d := int(t >> 8)
		if d == maxDisp {
			h, _ := slotOf(m.hash(m.nodes[j]), size)
			d = cyclicDist(h, j, size)
		}
		if back := cyclicDist(i, j, size); d >= back {
			m.tags[i], m.nodes[i] = withDisp(t&0xff, d-back), m.nodes[j]
			i = j
		}
	}
	m.tags[i], m.nodes[i] = 0, 0
	m.n--
}

// all yields every (block hash, node) entry, in no particular order. The lookup must not be
// modified meanwhile.
func (m *lookup) all() iter.Seq2[uint64, nref] {
	return func(yield func(uint64, nref) bool) {
		if m.zero != 0 && !yield(0, m.zero) {
			return
		}
		for i, t := range m.tags {
			if t != 0 && !yield(m.hash(m.nodes[i]), m.nodes[i]) {
				return
			}
		}
		for k, n := range m.other {
			if !yield(k, n) {
				return
			}
		}
	}
}

// cyclicDist is the distance from slot from forward to slot to in a table of size slots.
func cyclicDist(from, to, size int) int {
	if to >= from {
		return to - from
	}
	return to + size - from
}
