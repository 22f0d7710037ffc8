package index_test

import (
	"runtime"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/workload"
)

// TestRunsMemoryBytesTracksHeap checks the rule "on the run layout MemoryBytes is within 5 % of
// the index's live heap" on the conversation fixture (shared chains), on unshared chains, on
// evictable chains fresh and after evicting half of every rank and storing as many new blocks,
// and after churn (half of every chain removed from its middle, leaving holes); and that its
// counters are what a walk over the tree counts.
func TestRunsMemoryBytesTracksHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 260k entries")
	}
	for _, tc := range []struct {
		name  string
		build func() *index.Index
	}{
		{"conversations", func() *index.Index { return conversationIndexOf(t, index.Options{Runs: true}) }},
		{"unshared", func() *index.Index {
			ix := index.New(index.Options{Runs: true})
			storeUnshared(ix, 0, 64)
			return ix
		}},
		{"evictable", func() *index.Index {
			ix := index.New(index.Options{Runs: true, Evictable: true})
			storeUnshared(ix, 0, 64)
			return ix
		}},
		{"evictable/half evicted, refilled", func() *index.Index {
			ix := index.New(index.Options{Runs: true, Evictable: true})
			storeUnshared(ix, 0, 64)
			for r := uint64(1); r <= 64; r++ {
				ix.EvictLeaves(event.Rank{WorkerID: r}, 32*64)
			}
			storeUnshared(ix, 64, 96)
			return ix
		}},
		{"holes", func() *index.Index {
			ix := conversationIndexOf(t, index.Options{Runs: true})
			for r := uint64(0); r < 256; r += 2 {
				hs := make([]uint64, 0, 512)
				for j := uint64(256); j < 768; j++ {
					hs = append(hs, j+1)
				}
				ev := event.Removed(event.Rank{WorkerID: r}, 2, hs...)
				ix.Apply(&ev)
			}
			return ix
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := liveHeap()
			ix := tc.build()
			heap, est := float64(liveHeap()-before), float64(ix.MemoryBytes())
			t.Logf("blocks %d positions %d: heap %.0f B, estimate %.0f B (%.3f)", ix.Blocks(), ix.NodeCount(), heap, est, est/heap)
			if est < 0.95*heap || est > 1.05*heap {
				t.Errorf("MemoryBytes %.0f, live heap %.0f: off by more than 5 %%", est, heap)
			}
			if err := ix.AuditMemory(); err != nil {
				t.Error(err)
			}
			runtime.KeepAlive(ix)
		})
	}
}

// BenchmarkRunsMemoryBytes reports MemoryBytes on the run layout against the live heap (after
// GC) on the benchmark trace's ×8 stream (fresh; evictable with a third of every rank evicted)
// and on SMG's pinned workload and its fragmented profile: heap and estimate per (rank, block)
// entry and their ratio. One op builds the index.
//
//	go test ./index -run '^$' -bench BenchmarkRunsMemoryBytes -benchtime 1x
func BenchmarkRunsMemoryBytes(b *testing.B) {
	measure := func(b *testing.B, opts index.Options, build func(*index.Index)) {
		for b.Loop() {
			before := liveHeap()
			ix := index.New(opts)
			build(ix)
			heap, est := float64(liveHeap()-before), float64(ix.MemoryBytes())
			n := float64(ix.Blocks())
			b.ReportMetric(heap/n, "heap-B/entry")
			b.ReportMetric(est/n, "estimate-B/entry")
			b.ReportMetric(est/heap, "estimate/heap")
			runtime.KeepAlive(ix)
		}
	}
	wl := traceWorkload(b) // loaded before the heap is measured
	trace := func(ix *index.Index) {
		for j := range wl.Events {
			ix.Apply(&wl.Events[j])
		}
	}
	b.Run("trace-x8", func(b *testing.B) { measure(b, index.Options{Runs: true}, trace) })
	b.Run("trace-x8/evictable,third-evicted", func(b *testing.B) {
		measure(b, index.Options{Runs: true, Evictable: true}, func(ix *index.Index) {
			trace(ix)
			for _, ri := range ix.Ranks() {
				ix.EvictLeaves(ri.Rank, int(ri.Blocks/3))
			}
		})
	})
	for _, p := range []workload.SMGProfile{workload.SMGPinned(), workload.SMGFragmented()} {
		b.Run("smg-"+p.Name, func(b *testing.B) {
			w, err := workload.GenerateSMG(p)
			if err != nil {
				b.Fatal(err)
			}
			measure(b, index.Options{Runs: true}, func(ix *index.Index) {
				for i := range w.Ops {
					ev := w.Ops[i].Event()
					ix.Apply(&ev)
				}
			})
		})
	}
}
