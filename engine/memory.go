package engine

// The memory parts of the engine (kvindex_memory_bytes{part} and kvindex_memory_limit_bytes{part},
// docs/API.md "Memory"): what bounds the resident set besides the Go runtime's own overhead.
const (
	MemMemtable  = "memtable"        // Pebble's memtables, mutable and queued for flush
	MemCache     = "block_cache"     // Pebble's block cache
	MemIndex     = "index"           // every partition's tree (all tiers), estimated from its counts
	MemDumpCache = "tree_dump_cache" // the range route's cached TreeDump answers (encoded bytes)
	MemApprox    = "approx"          // approximate mode's side indexes, estimated from their counts
)

// MemoryPart is one part's bytes now and its configured bound (Limit, when Bounded).
type MemoryPart struct {
	Name    string
	Bytes   uint64
	Limit   uint64
	Bounded bool
}

// Memory returns every part, each present (0 when unused): Pebble's own accounting for the
// memtables and the block cache, the partitions' tiers' estimate for the index
// (tier.Tiers.MemoryBytes), the TreeDump cache's cost, the side index's estimate. It reads
// Pebble's metrics once and a few counters per partition: no walk over blocks or entries.
func (e *Engine) Memory() []MemoryPart {
	pm := e.st.Metrics()
	mt, bc := e.st.MemoryLimits()
	dc, dcMax := e.DumpCacheBytes()
	ix, bound := e.indexMemory()
	out := []MemoryPart{
		{Name: MemMemtable, Bytes: pm.MemTable.Size, Limit: uint64(max(mt, 0)), Bounded: true},
		{Name: MemCache, Bytes: uint64(max(pm.BlockCache.Size, 0)), Limit: uint64(max(bc, 0)), Bounded: true},
		{Name: MemIndex, Bytes: ix, Limit: bound, Bounded: bound > 0},
		{Name: MemDumpCache, Bytes: dc, Limit: dcMax, Bounded: true},
		{Name: MemApprox},
	}
	if a := e.approx; a != nil {
		out[4].Bytes = a.MemoryBytes()
		out[4].Limit, out[4].Bounded = a.MemoryLimit()
	}
	return out
}

// StoreFlushes is Pebble's memtable flushes since start.
func (e *Engine) StoreFlushes() int64 { return e.st.Metrics().Flush.Count }
