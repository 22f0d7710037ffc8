package bench

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/kvindex/kvindex/wal"
	"github.com/kvindex/kvindex/workload"
	"go.uber.org/goleak"
)

// TestRunAccuracyIsExactWithEveryEvent: the simulated workers know their true caches, so with
// every event flowing the index predicts every outcome exactly (0 over, 0 under); with a worker's
// Removed events lost the predictions go wrong, and the metric shows it.
func TestRunAccuracyIsExactWithEveryEvent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // what earlier tests left is theirs
	reqs := smallTrace(t, 300)
	rep, err := Run(context.Background(), Options{
		Requests: reqs, Scale: 1, Workload: workload.WorkloadOptions{Workers: 4, CacheBlocks: 16}, Durability: wal.NoSync, Lanes: 1,
		DataDir: t.TempDir(), Logger: quiet(), Accuracy: true,
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
		return v
	}
	if get(MetricAccuracyOutcomes) < 100 {
		t.Fatalf("only %v outcomes", get(MetricAccuracyOutcomes))
	}
	if get(MetricAccuracyOver) != 0 || get(MetricAccuracyUnder) != 0 || get(MetricAccuracyExactRatio) != 1 {
		t.Fatalf("with every event: over %v under %v exact ratio %v, want 0, 0, 1",
			get(MetricAccuracyOver), get(MetricAccuracyUnder), get(MetricAccuracyExactRatio))
	}
	if get(MetricAccuracyDroppedOver)+get(MetricAccuracyDroppedUnder) == 0 || get(MetricAccuracyDroppedExactRatio) >= 1 {
		t.Fatalf("with worker %d's Removed events dropped: over %v, under %v, exact ratio %v: the loss does not show",
			AccuracyDropWorker, get(MetricAccuracyDroppedOver), get(MetricAccuracyDroppedUnder), get(MetricAccuracyDroppedExactRatio))
	}
	t.Logf("outcomes %v; dropped: over %v (%v blocks), under %v, exact ratio %.3f", get(MetricAccuracyOutcomes),
		get(MetricAccuracyDroppedOver), get(MetricAccuracyDroppedOverBlocks), get(MetricAccuracyDroppedUnder), get(MetricAccuracyDroppedExactRatio))
}

func TestRunAccuracyRefusesAWorkloadDir(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // what earlier tests left is theirs
	wl, err := workload.Generate(smallTrace(t, 20), 1, workload.WorkloadOptions{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "wl")
	if err := workload.WriteWorkloadDir(dir, wl); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Options{WorkloadDir: dir, DataDir: t.TempDir(), Logger: quiet(), Accuracy: true}); !errors.Is(err, ErrAccuracyNeedsTrace) {
		t.Fatalf("Run: %v", err)
	}
}
