package bench

import (
	"context"
	"errors"
	"testing"

	"github.com/kvindex/kvindex/workload"
)

func smallSMG(t *testing.T) *workload.SMGWorkload {
	t.Helper()
	p := workload.SMGFragmented()
	p.TargetBlocks /= 200
	w, err := workload.GenerateSMG(p)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestRunSMG runs a small fragmented stream: every answer agrees with the model and the report
// has what SMG's table has.
func TestRunSMG(t *testing.T) {
	w := smallSMG(t)
	rep, ix, err := RunSMG(context.Background(), w, SMGOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ix.Blocks() != w.Resident() {
		t.Fatalf("index holds %d, want %d", ix.Blocks(), w.Resident())
	}
	queries := 0
	for _, c := range w.Cells {
		queries += len(c.Queries)
	}
	for _, name := range []string{MetricSMGWrite, MetricSMGHeap, MetricSMGRSSDelta, "smg_h1_p50_ns", "smg_gate_d78_w64_p99_ns", "smg_miss_p99_ns"} {
		if _, ok := rep.Get(name); !ok {
			t.Errorf("report lacks %s", name)
		}
	}
	if v, _ := rep.Get(MetricSMGAnswersChecked); int(v) != queries {
		t.Fatalf("%v answers checked, want %d", v, queries)
	}
}

// TestRunSMGCatchesWrongAnswers makes the model wrong about one holder: the check must see it.
func TestRunSMGCatchesWrongAnswers(t *testing.T) {
	w := smallSMG(t)
	q := w.Cells[0].Queries[0]
	w.Families[q.Family].Held[0] = 0 // the model now says holder 0 of that family scores nothing
	if _, _, err := RunSMG(context.Background(), w, SMGOptions{}); !errors.Is(err, ErrSMGMismatch) {
		t.Fatalf("got %v, want ErrSMGMismatch", err)
	}
}
