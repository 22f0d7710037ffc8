package index_test

import (
	"context"
	"os"
	"testing"

	"github.com/kvindex/kvindex/bench"
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
