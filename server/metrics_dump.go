package server

import (
	"github.com/kvindex/kvindex/engine"
	"github.com/prometheus/client_golang/prometheus"
)

// dumpCacheCollector exports the engine's TreeDump cache counters (the library links no
// Prometheus: the engine keeps plain counters, read here).
type dumpCacheCollector struct{ e *engine.Engine }

var (
	descDumpHits   = prometheus.NewDesc("kvindex_dump_cache_hits_total", "TreeDump answers served from the cache (unchanged or extended with a Stored tail).", nil, nil)
	descDumpMisses = prometheus.NewDesc("kvindex_dump_cache_misses_total", "TreeDump answers that needed a full build (shared builds counted per request).", nil, nil)
	descDumpBuilds = prometheus.NewDesc("kvindex_dump_builds_total", "Full TreeDump builds (DumpRank runs).", nil, nil)
	descDumpExt    = prometheus.NewDesc("kvindex_dump_cache_extensions_total", "Cached TreeDumps extended with a Stored tail instead of rebuilt.", nil, nil)
	descDumpShared = prometheus.NewDesc("kvindex_dump_shared_total", "TreeDump requests that waited on another request's flight.", nil, nil)
)

func (c dumpCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{descDumpHits, descDumpMisses, descDumpBuilds, descDumpExt, descDumpShared} {
		ch <- x
	}
}

func (c dumpCacheCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.e.DumpCacheCounters()
	for _, x := range []struct {
		d *prometheus.Desc
		v uint64
	}{{descDumpHits, n.Hits}, {descDumpMisses, n.Misses}, {descDumpBuilds, n.Builds}, {descDumpExt, n.Extensions}, {descDumpShared, n.Shared}} {
		ch <- prometheus.MustNewConstMetric(x.d, prometheus.CounterValue, float64(x.v))
	}
}
