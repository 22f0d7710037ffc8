package approx

import "unsafe"

// EntryBytes estimates the heap of one side entry besides its share of the side tree: the
// entry itself, its map slot (key and pointer, at a swiss table's 7/8 load, plus a control
// byte) and its B-tree item pointer (nodes half to fully used: about 12 B).
const EntryBytes = int(unsafe.Sizeof(entry{})) + (int(unsafe.Sizeof(key{}))+8)*8/7 + 1 + 12

// MemoryBytes estimates the heap of every partition's side index: entries × EntryBytes plus each
// side tree's index.Index.MemoryBytes. It takes the Set's lock briefly (one pass over the
// partitions, not over the entries).
func (s *Set) MemoryBytes() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b uint64
	for _, sd := range s.parts {
		b += uint64(len(sd.entries))*uint64(EntryBytes) + sd.tree.MemoryBytes()
	}
	return b
}

// Partitions returns how many partitions have a side index (each is bounded by
// Options.MaxBlocks on its own).
func (s *Set) Partitions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parts)
}

// MemoryLimit is MemoryBytes' bound under Options.MaxBlocks (false when unbounded): MaxBlocks
// entries in each partition with a side index (at least one), each at the side index's cost
// per entry now (MemoryBytes over its entries; EntryBytes while it holds none). No constant
// per-entry cost of the tree is assumed: its share follows index.Index.MemoryBytes.
func (s *Set) MemoryLimit() (uint64, bool) {
	if s.opts.MaxBlocks <= 0 {
		return 0, false
	}
	s.mu.Lock()
	parts := uint64(max(len(s.parts), 1))
	var b, n uint64
	for _, sd := range s.parts {
		b += uint64(len(sd.entries))*uint64(EntryBytes) + sd.tree.MemoryBytes()
		n += uint64(len(sd.entries))
	}
	s.mu.Unlock()
	per := uint64(EntryBytes)
	if n > 0 {
		per = b / n
	}
	return uint64(s.opts.MaxBlocks) * parts * per, true
}
