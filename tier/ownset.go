package tier

// ownSet is one rank's edges in one tier, keyed by their child block hash (a rank holds an edge
// only under the edge's own child hash, so the key is read back from the edge). It is an
// open-addressing table of edge pointers with linear probing and backward-shift deletion (no
// tombstones), at most 3/4 full and grown by half: 8 bytes a slot, about 11–16 bytes an entry.
// Owned by the rank's writer.
type ownSet struct {
	slots []*edge
	n     int
}

func ownSlot(k uint64, size int) int {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return int((k >> 1) % uint64(size))
}

func (s *ownSet) find(k uint64) int {
	size := len(s.slots)
	if size == 0 {
		return -1
	}
	for i := ownSlot(k, size); ; {
		e := s.slots[i]
		if e == nil {
			return -1
		}
		if e.child == k {
			return i
		}
		if i++; i == size {
			i = 0
		}
	}
}

// get returns the edge the rank holds under block hash k.
func (s *ownSet) get(k uint64) *edge {
	if i := s.find(k); i >= 0 {
		return s.slots[i]
	}
	return nil
}

// put adds e (whose child hash is absent).
func (s *ownSet) put(e *edge) {
	if 4*(s.n+1) > 3*len(s.slots) {
		s.grow()
	}
	s.insert(e)
}

func (s *ownSet) insert(e *edge) {
	size := len(s.slots)
	i := ownSlot(e.child, size)
	for s.slots[i] != nil {
		if i++; i == size {
			i = 0
		}
	}
	s.slots[i] = e
	s.n++
}

func (s *ownSet) grow() {
	old := s.slots
	s.slots, s.n = make([]*edge, max(8, len(old)+len(old)/2)), 0
	for _, e := range old {
		if e != nil {
			s.insert(e)
		}
	}
}

// del removes block hash k and returns its edge, or nil.
func (s *ownSet) del(k uint64) *edge {
	i := s.find(k)
	if i < 0 {
		return nil
	}
	e := s.slots[i]
	size := len(s.slots)
	// Backward shift: move each later entry of the run into the hole when its home slot does
	// not lie cyclically in (hole, its slot].
	for j := i; ; {
		if j++; j == size {
			j = 0
		}
		c := s.slots[j]
		if c == nil {
			break
		}
		home := ownSlot(c.child, size)
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.slots[i] = c
			i = j
		}
	}
	s.slots[i] = nil
	s.n--
	return e
}

// all returns the edges, in no particular order.
func (s *ownSet) all() []*edge {
	out := make([]*edge, 0, s.n)
	for _, e := range s.slots {
		if e != nil {
			out = append(out, e)
		}
	}
	return out
}
