package index_test

import (
	"context"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex/bench"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/workload"
)

// BenchmarkSMG runs SMG's pinned workload (workload.GenerateSMG: SMG's radix tree README and
// pinned_bench.rs, 12.8 M holder-blocks over 256 holders) and its fragmented profile through
// a fresh index (one op: generate untimed, apply on one goroutine, time every query of every
// cell, check every answer against the model), reporting what SMG's README reports: bytes per
// holder-block (live heap, RSS delta as SMG measures, RSS settled), write blocks/s, and per
// cell p50/p99 (SMG: 26.9 B, 4.6 M blocks/s, single-holder p50 292 ns, gate p99 7.6 µs;
// fragmented gate p99 18.5 µs at 27.5 B). KVINDEX_SMG_LARGE=1 adds the 128 M scale (2,048
// holders; SMG: gate p99 8.0 µs), which needs ≈ 10 GB.
//
//	go test ./index -run '^$' -bench BenchmarkSMG -benchtime 1x
func BenchmarkSMG(b *testing.B) {
	forSMGProfiles(b, func(b *testing.B, w *workload.SMGWorkload) {
		for i := 0; i < b.N; i++ {
			rep, _, err := bench.RunSMG(context.Background(), w, bench.SMGOptions{Index: benchOptions()})
			if err != nil {
				b.Fatal(err)
			}
			if i == b.N-1 {
				for _, m := range rep.Metrics {
					b.ReportMetric(m.Value, m.Name)
				}
			}
		}
	})
}

// BenchmarkRunsSMG runs BenchmarkSMG's streams through the run-layout prototype (runs.go): the
// same stream on one writer, the same cells timed one query at a time, every answer checked
// against the model. Its answers are rank ids and scores, deepest first, without the rank
// table's (worker id, dp rank) order that FindMatchesInto lays out.
//
//	go test ./index -run '^$' -bench BenchmarkRunsSMG -benchtime 1x
func BenchmarkRunsSMG(b *testing.B) {
	forSMGProfiles(b, func(b *testing.B, w *workload.SMGWorkload) {
		for i := 0; i < b.N; i++ {
			before := liveHeap()
			rt := index.NewRunTree()
			start := time.Now()
			for j := range w.Ops {
				ev := w.Ops[j].Event()
				if res := rt.Apply(&ev); res.Status != index.StatusOK {
					b.Fatalf("op %d: %v", j, res.Status)
				}
			}
			fill := time.Since(start)
			heap := liveHeap() - before
			b.ReportMetric(float64(w.StreamBlocks)/fill.Seconds(), "smg_write_blocks_per_s")
			b.ReportMetric(float64(heap)/float64(w.Resident()), "smg_heap_bytes_per_block")
			b.ReportMetric(float64(rt.MemoryBytes())/float64(w.Resident()), "smg_estimate_bytes_per_block")
			var dst []index.RunScore
			lat := make([]time.Duration, 0, 2000)
			for _, c := range w.Cells {
				lat = lat[:0]
				for _, q := range c.Queries {
					t := time.Now()
					dst = rt.MatchInto(dst[:0], q.Contents)
					lat = append(lat, time.Since(t))
				}
				for qi, q := range c.Queries {
					got := rt.Scores(q.Contents)
					n := 0
					w.Want(q, func(h uint32, s int) {
						n++
						if got[workload.SMGRank(h)] != uint32(s) {
							b.Fatalf("cell %s query %d holder %d: runs %d, model %d", c.Name, qi, h, got[workload.SMGRank(h)], s)
						}
					})
					if n != len(got) {
						b.Fatalf("cell %s query %d: runs scores %d ranks, the model %d", c.Name, qi, len(got), n)
					}
				}
				slices.Sort(lat)
				name := "smg_" + strings.NewReplacer("=", "", " ", "_").Replace(strings.ToLower(c.Name))
				b.ReportMetric(float64(lat[int(float64(len(lat)-1)*0.5+0.5)].Nanoseconds()), name+"_p50_ns")
				b.ReportMetric(float64(lat[int(float64(len(lat)-1)*0.99+0.5)].Nanoseconds()), name+"_p99_ns")
			}
			runtime.KeepAlive(rt)
		}
	})
}

// forSMGProfiles runs fn on the pinned and fragmented streams (and the 128 M one with
// KVINDEX_SMG_LARGE set), each generated once, untimed.
func forSMGProfiles(b *testing.B, fn func(*testing.B, *workload.SMGWorkload)) {
	profiles := []workload.SMGProfile{workload.SMGPinned(), workload.SMGFragmented()}
	if os.Getenv("KVINDEX_SMG_LARGE") != "" {
		profiles = append(profiles, workload.SMGLarge())
	}
	for _, p := range profiles {
		b.Run("profile="+p.Name, func(b *testing.B) {
			w, err := workload.GenerateSMG(p)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			fn(b, w)
		})
	}
}
