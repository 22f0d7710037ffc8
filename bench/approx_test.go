package bench

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/kvindex/kvindex/wal"
	"github.com/kvindex/kvindex/workload"
	"go.uber.org/goleak"
)

// TestRunApproximateReportsDecisions checks Options.Approximate (issue 14) on the small trace:
// one decision recorded per non-empty query, the metrics present and sane (rates > 0, hit ratios
// in [0, 1], percentiles ordered), and the side index's rule: it never forgets a block routed to
// a worker within the TTL, so the chosen worker's side score is at least what the simulated
// worker really held — approx_chosen_hit_ratio ≥ routing_hit_ratio, and the best score at least
// the chosen one.
func TestRunApproximateReportsDecisions(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // what earlier tests left is theirs
	reqs := smallTrace(t, 150)
	wopts := workload.WorkloadOptions{Workers: 8, CacheBlocks: 64}
	want, err := workload.Generate(reqs, 2, wopts)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), Options{
		Requests: reqs, Scale: 2, Workload: wopts, Durability: wal.NoSync, Lanes: 1,
		DataDir: t.TempDir(), Logger: quiet(), Approximate: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) float64 {
		t.Helper()
		v, ok := rep.Get(name)
		if !ok {
			t.Fatalf("metric %s missing", name)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("metric %s = %v", name, v)
		}
		return v
	}
	if got, n := get(MetricApproxDecisions), len(nonEmpty(want.Queries)); got != float64(n) || got != get(MetricQueries) {
		t.Errorf("approx_decisions = %v, queries = %v, want %d (one per non-empty query)", got, get(MetricQueries), n)
	}
	for _, name := range []string{MetricApproxDecisionsPerS, MetricApproxBlocksPerS, MetricApproxSideBlocks, MetricFindMatchesP50} {
		if v := get(name); v <= 0 {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	if p50, p99 := get(MetricFindMatchesP50), get(MetricFindMatchesP99); p50 > p99 {
		t.Errorf("percentiles out of order: p50 %v p99 %v", p50, p99)
	}
	best, chosen, routing := get(MetricApproxHitRatio), get(MetricApproxChosenHitRatio), get(MetricRoutingHitRatio)
	for name, v := range map[string]float64{MetricApproxHitRatio: best, MetricApproxChosenHitRatio: chosen} {
		if v < 0 || v > 1 {
			t.Errorf("%s = %v, outside [0, 1]", name, v)
		}
	}
	if routing != want.RoutingHitRatio {
		t.Errorf("routing_hit_ratio = %v, want the generator's %v", routing, want.RoutingHitRatio)
	}
	if routing <= 0 || chosen < routing || best < chosen {
		t.Errorf("hit ratios: routing %v, chosen %v, best %v; want 0 < routing ≤ chosen ≤ best", routing, chosen, best)
	}
	if v := get(MetricApproxExpired); v != 0 {
		t.Errorf("approx_expired = %v within the default TTL, want 0", v)
	}
	if _, ok := rep.Get(MetricIngestEventsPerS); ok {
		t.Error("approximate mode ingested events")
	}
}

// TestRunApproximateRefusesAWorkloadWithoutDecisions checks that --approximate refuses a workload
// dir whose queries do not name their worker (one written before Query.Worker existed) with
// ErrNoDecisions instead of recording made-up decisions.
func TestRunApproximateRefusesAWorkloadWithoutDecisions(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // what earlier tests left is theirs
	wl, err := workload.Generate(smallTrace(t, 20), 1, workload.WorkloadOptions{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range wl.Queries {
		wl.Queries[i].Worker = workload.NoWorker
	}
	dir := filepath.Join(t.TempDir(), "wl")
	if err := workload.WriteWorkloadDir(dir, wl); err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), Options{WorkloadDir: dir, Durability: wal.NoSync, Lanes: 1,
		DataDir: t.TempDir(), Logger: quiet(), Approximate: true})
	if !errors.Is(err, ErrNoDecisions) {
		t.Fatalf("Run error %v, want ErrNoDecisions", err)
	}
}
