package index

// MemoryBytes estimates the heap the index holds, cheaply enough for every /metrics scrape: the
// byte counters the run tree's writers keep as they change its shapes, read with atomic loads
// (runs_memory.go; doc.go "Memory"). It reads within 5 % of the live heap
// (TestMemoryBytesTracksHeap, TestRunsMemoryBytesTracksHeap).
func (ix *Index) MemoryBytes() uint64 { return ix.memoryBytesRuns() }
