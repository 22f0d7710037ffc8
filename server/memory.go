package server

import (
	"github.com/kvindex/kvindex/approx"
	"github.com/prometheus/client_golang/prometheus"
)

// Memory parts of kvindex_memory_bytes and kvindex_memory_limit_bytes: what bounds the resident
// set besides the Go runtime's own overhead (docs/BENCHMARKS.md "Memory: what bounds RSS").
const (
	memMemtable  = "memtable"        // Pebble's memtables, mutable and queued for flush
	memCache     = "block_cache"     // Pebble's block cache
	memIndex     = "index"           // every partition's tree (all tiers), estimated from its counts
	memDumpCache = "tree_dump_cache" // the range route's cached TreeDump answers (encoded bytes)
	memApprox    = "approx"          // approximate mode's side indexes, estimated from their counts
)

var (
	descMemBytes = prometheus.NewDesc("kvindex_memory_bytes",
		"Bytes held by each part that bounds the resident set: memtable and block_cache (Pebble's own accounting), index and approx (estimates from live counts, see docs/API.md), tree_dump_cache (the encoded answers ristretto counts).",
		[]string{"part"}, nil)
	descMemLimit = prometheus.NewDesc("kvindex_memory_limit_bytes",
		"Configured bound of a part of kvindex_memory_bytes: memtable (--memtable-size × 2, where writes stall), block_cache (--cache-size), tree_dump_cache (its max cost), approx (--approx-max-blocks × partitions × bytes per entry; absent when unbounded). The index has no bound of its own: it follows the live set.",
		[]string{"part"}, nil)
	descStoreFlushes = prometheus.NewDesc("kvindex_store_flushes_total", "Pebble memtable flushes since start.", nil, nil)
)

// memoryCollector exports kvindex_memory_bytes, kvindex_memory_limit_bytes and the flush count.
// A scrape reads Pebble's metrics once, two atomics per tree and the 256 child-table sizes per
// partition tree: no walk over blocks or entries.
type memoryCollector struct{ s *Server }

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descMemBytes
	ch <- descMemLimit
	ch <- descStoreFlushes
}

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	for part, v := range c.s.memoryBytes() {
		ch <- prometheus.MustNewConstMetric(descMemBytes, prometheus.GaugeValue, float64(v), part)
	}
	for part, v := range c.s.memoryLimits() {
		ch <- prometheus.MustNewConstMetric(descMemLimit, prometheus.GaugeValue, float64(v), part)
	}
	ch <- prometheus.MustNewConstMetric(descStoreFlushes, prometheus.CounterValue, float64(c.s.e.Store().Metrics().Flush.Count))
}

// memoryBytes returns the bytes each part holds now (every part present, 0 when unused).
func (s *Server) memoryBytes() map[string]uint64 {
	pm := s.e.Store().Metrics()
	dc, _ := s.e.DumpCacheBytes()
	out := map[string]uint64{
		memMemtable:  pm.MemTable.Size,
		memCache:     uint64(max(pm.BlockCache.Size, 0)),
		memDumpCache: dc,
	}
	var ix uint64
	for _, p := range s.parts.All() {
		ix += p.Tiers.MemoryBytes()
	}
	out[memIndex] = ix
	if s.approx != nil {
		out[memApprox] = s.approx.MemoryBytes()
	} else {
		out[memApprox] = 0
	}
	return out
}

// memoryLimits returns the configured bound of each bounded part.
func (s *Server) memoryLimits() map[string]uint64 {
	mt, bc := s.e.Store().MemoryLimits()
	_, dcMax := s.e.DumpCacheBytes()
	out := map[string]uint64{
		memMemtable:  uint64(max(mt, 0)),
		memCache:     uint64(max(bc, 0)),
		memDumpCache: dcMax,
	}
	if s.cfg.MaxIndexBytes > 0 {
		out[memIndex] = s.cfg.MaxIndexBytes
	}
	if n := s.cfg.ApproxMaxBlocks; n > 0 && s.approx != nil {
		out[memApprox] = uint64(n) * uint64(max(s.approx.Partitions(), 1)) * uint64(approxBytesPerBlock)
	}
	return out
}

// approxBytesPerBlock is the bound per side entry used for the approx limit: the entry's own
// bookkeeping (approx.EntryBytes) plus an unshared tree entry (a 48-byte node and its 13-byte
// lookup slot).
const approxBytesPerBlock = approx.EntryBytes + 48 + 13
