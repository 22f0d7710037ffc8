package server

import "github.com/prometheus/client_golang/prometheus"

var (
	descMemBytes = prometheus.NewDesc("kvindex_memory_bytes",
		"Bytes held by each part that bounds the resident set: memtable and block_cache (Pebble's own accounting), index and approx (estimates from live counts, see docs/API.md), tree_dump_cache (the encoded answers ristretto counts).",
		[]string{"part"}, nil)
	descMemLimit = prometheus.NewDesc("kvindex_memory_limit_bytes",
		"Configured bound of a part of kvindex_memory_bytes: memtable (--memtable-size × 2, where writes stall), block_cache (--cache-size), tree_dump_cache (its max cost), approx (--approx-max-blocks × partitions × the side index's bytes per entry; absent when unbounded), index (--max-index-bytes; absent when unbounded).",
		[]string{"part"}, nil)
	descStoreFlushes = prometheus.NewDesc("kvindex_store_flushes_total", "Pebble memtable flushes since start.", nil, nil)
)

// memoryCollector exports the engine's memory parts (engine.Engine.Memory) and the flush count.
type memoryCollector struct{ s *Server }

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descMemBytes
	ch <- descMemLimit
	ch <- descStoreFlushes
}

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.s.e.Memory() {
		ch <- prometheus.MustNewConstMetric(descMemBytes, prometheus.GaugeValue, float64(p.Bytes), p.Name)
		if p.Bounded {
			ch <- prometheus.MustNewConstMetric(descMemLimit, prometheus.GaugeValue, float64(p.Limit), p.Name)
		}
	}
	ch <- prometheus.MustNewConstMetric(descStoreFlushes, prometheus.CounterValue, float64(c.s.e.StoreFlushes()))
}
