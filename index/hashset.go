package index

// hashSet is a set of uint64 keys: an open-addressing table of 8-byte slots with linear probing
// and backward-shift deletion (no tombstones), at most 4/5 full and grown by half, so it costs
// 10 to 15 bytes a key (a Go map of uint64 costs about 20). 0 marks an empty slot; the key 0
// is kept in zero. It does not shrink; drop it whole to give its room back.
type hashSet struct {
	slots []uint64
	n     int // keys in slots
	zero  bool
}

// home returns key k's home slot in a table of size slots (the rank lookup's, slotOf).
func home(k uint64, size int) int {
	i, _ := slotOf(k, size)
	return i
}

// len returns the number of keys.
func (s *hashSet) len() int {
	if s.zero {
		return s.n + 1
	}
	return s.n
}

// cap returns the number of slots.
func (s *hashSet) cap() int { return len(s.slots) }

func (s *hashSet) find(k uint64) int {
	size := len(s.slots)
	if size == 0 {
		return -1
	}
	for i := home(k, size); ; {
		switch s.slots[i] {
		case 0:
			return -1
		case k:
			return i
		}
		if i++; i == size {
			i = 0
		}
	}
}

// has reports whether k is in the set.
func (s *hashSet) has(k uint64) bool {
	if k == 0 {
		return s.zero
	}
	return s.find(k) >= 0
}

// add puts k in the set and reports whether it was absent.
func (s *hashSet) add(k uint64) bool {
	if k == 0 {
		added := !s.zero
		s.zero = true
		return added
	}
	if s.find(k) >= 0 {
		return false
	}
	if 5*(s.n+1) > 4*len(s.slots) {
		old := s.slots
		s.slots, s.n = make([]uint64, max(8, len(old)+len(old)/2)), 0
		for _, o := range old {
			if o != 0 {
				s.put(o)
			}
		}
	}
	s.put(k)
	return true
}

// put stores k (absent, not 0) in the table, which has room.
func (s *hashSet) put(k uint64) {
	size := len(s.slots)
	i := home(k, size)
	for s.slots[i] != 0 {
		if i++; i == size {
			i = 0
		}
	}
	s.slots[i] = k
	s.n++
}

// del removes k and reports whether it was present. Each later key of the run moves back into
// the hole when the hole lies between its home slot and its slot (cyclically).
func (s *hashSet) del(k uint64) bool {
	if k == 0 {
		had := s.zero
		s.zero = false
		return had
	}
	i := s.find(k)
	if i < 0 {
		return false
	}
	size := len(s.slots)
	for j := i; ; {
		if j++; j == size {
			j = 0
		}
		o := s.slots[j]
		if o == 0 {
			break
		}
		if cyclicDist(home(o, size), j, size) >= cyclicDist(i, j, size) {
			s.slots[i] = o
			i = j
		}
	}
	s.slots[i] = 0
	s.n--
	return true
}
