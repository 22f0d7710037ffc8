package server

import (
	"context"
	"github.com/kvindex/kvindex/engine"
	"io"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// TestMemoryMetrics checks the rules of kvindex_memory_bytes and kvindex_memory_limit_bytes: every
// part is exported; after ingest the memtable and the index are non-zero and the index's bytes
// are the trees' estimate; the limits are the configured sizes (memtable twice --memtable-size,
// block cache --cache-size, the TreeDump cache's max cost); and kvindex_store_flushes_total
// counts the memtable flushes the ingest caused.
func TestMemoryMetrics(t *testing.T) {
	s, url, stop := serveConfig(t, Config{DataDir: "data", FS: vfs.NewMem(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Lanes: 2, MemTableSize: 1 << 20, CacheSize: 2 << 20})
	defer func() { _ = stop() }()
	_, scrape := call(t, "GET", url+"/metrics", "")
	flushes0, ok := metricValue(t, scrape, "kvindex_store_flushes_total")
	if !ok {
		t.Fatal("kvindex_store_flushes_total missing")
	}
	// 64 ranks × 64 events × 16 blocks: about 4 MiB of log records, several 1 MiB memtables.
	const ranks, events, blocks = 64, 64, 16
	for r := range uint64(ranks) {
		evs := make([]event.RouterEvent, 0, events)
		var parent *uint64
		for id := range uint64(events) {
			bs := make([]event.Block, blocks)
			for j := range bs {
				h := r<<32 | id<<8 | uint64(j)
				bs[j] = event.Block{BlockHash: h, TokensHash: h}
			}
			evs = append(evs, event.Stored(event.Rank{WorkerID: r}, id+1, parent, bs...))
			last := bs[blocks-1].BlockHash
			parent = &last
		}
		if _, err := s.e.Ingest(context.Background(), partition.Default, evs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.e.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, scrape = call(t, "GET", url+"/metrics", "")
	val := func(series string) float64 {
		v, ok := metricValue(t, scrape, series)
		if !ok {
			t.Fatalf("%s missing", series)
		}
		return v
	}
	for _, part := range []string{engine.MemMemtable, engine.MemCache, engine.MemIndex, engine.MemDumpCache, engine.MemApprox} {
		val(`kvindex_memory_bytes{part="` + part + `"}`)
	}
	if v := val(`kvindex_memory_bytes{part="memtable"}`); v <= 0 {
		t.Errorf("memtable bytes %v after ingest, want > 0", v)
	}
	var want float64
	for _, p := range s.parts.All() {
		want += float64(p.Tiers.MemoryBytes())
	}
	if v := val(`kvindex_memory_bytes{part="index"}`); v <= 0 || v != want {
		t.Errorf("index bytes %v, want the tree's estimate %v (> 0)", v, want)
	}
	if per := want / (ranks * events * blocks); per < 16 || per > 120 {
		t.Errorf("index estimate %.1f B per (rank, block), want 16–120 (about 33 on these chains)", per)
	}
	for part, want := range map[string]float64{engine.MemMemtable: 2 << 20, engine.MemCache: 2 << 20, engine.MemDumpCache: engine.DefaultDumpCacheMaxCost} {
		if v := val(`kvindex_memory_limit_bytes{part="` + part + `"}`); v != want {
			t.Errorf("limit of %s %v, want %v", part, v, want)
		}
	}
	if _, ok := metricValue(t, scrape, `kvindex_memory_limit_bytes{part="approx"}`); ok {
		t.Error("approx limit exported without --approx-max-blocks")
	}
	if v := val("kvindex_store_flushes_total"); v <= flushes0 {
		t.Errorf("kvindex_store_flushes_total %v after 4 MiB of log, before %v: want more", v, flushes0)
	}
}

// TestMemoryLimitApprox checks the rule "with --approx-max-blocks N the approx part's limit is N ×
// partitions (at least one) × the side index's bytes per entry" (approx.Set.MemoryLimit), before
// and after decisions.
func TestMemoryLimitApprox(t *testing.T) {
	s, url, stop := serveConfig(t, Config{DataDir: "data", FS: vfs.NewMem(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Lanes: 1, ApproxMaxBlocks: 1000})
	defer func() { _ = stop() }()
	check := func(when string) {
		t.Helper()
		want, _ := s.e.Approx().MemoryLimit()
		_, scrape := call(t, "GET", url+"/metrics", "")
		if v, ok := metricValue(t, scrape, `kvindex_memory_limit_bytes{part="approx"}`); !ok || v != float64(want) || want < 1000 {
			t.Errorf("%s: approx limit %v (present %v), want %d", when, v, ok, want)
		}
	}
	check("empty")
	if code, body := call(t, "POST", url+"/v1/routing_decisions", `{"worker_id":1,"block_hashes":[1,2,3]}`); code != 200 {
		t.Fatalf("decision: %d %s", code, body)
	}
	check("after a decision")
}
