package bench

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/wal"
	"github.com/kvindex/kvindex/workload"
	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

// smallTrace is the head of the repo's real conversation trace: real prompt shapes, small enough
// for -race.
func smallTrace(t *testing.T, n int) []workload.Request {
	t.Helper()
	reqs, err := workload.LoadTraceFile("../testdata/conversation_trace.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return reqs[:n]
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestRunReportsEveryMetric(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // what earlier tests left is theirs
	reqs := smallTrace(t, 150)
	wopts := workload.WorkloadOptions{Workers: 8, CacheBlocks: 64}
	want, err := workload.Generate(reqs, 2, wopts)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), Options{
		Requests: reqs, Scale: 2, Workload: wopts,
		Producers: 3, Batch: 2, Durability: wal.NoSync, Lanes: 1, // one lane: see the report (Recover's progress callback races with several)
		LoadedMax: 2 * time.Second, DataDir: t.TempDir(), Logger: quiet(),
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
	for _, name := range RequiredMetrics {
		get(name)
	}
	if got := get(MetricEvents); got != float64(len(want.Events)) {
		t.Errorf("events = %v, want %d", got, len(want.Events))
	}
	if got := get(MetricBlocks); got != float64(want.Blocks) {
		t.Errorf("blocks = %v, want %d", got, want.Blocks)
	}
	if got := get(MetricRoutingHitRatio); got != want.RoutingHitRatio {
		t.Errorf("routing_hit_ratio = %v, want %v", got, want.RoutingHitRatio)
	}
	for _, name := range []string{MetricIngestEventsPerS, MetricIngestBlocksPerS, MetricMemoryIngestBlocksPerS,
		MetricPebbleCeilingEventsPS, MetricIngestVsCeiling, MetricFindMatchesP50, MetricRestartSeconds,
		MetricRestartBlocksPerS, MetricWALBytesPerEvent} {
		if v := get(name); v <= 0 {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	if p50, p99, p999 := get(MetricFindMatchesP50), get(MetricFindMatchesP99), get(MetricFindMatchesP999); p50 > p99 || p99 > p999 {
		t.Errorf("percentiles out of order: p50 %v p99 %v p999 %v", p50, p99, p999)
	}
	// A record is at least its 1+3+1+4 framing bytes; Pebble's key and block overhead add to it.
	if v := get(MetricWALBytesPerEvent); v < 9 {
		t.Errorf("wal_bytes_per_event = %v, below the record framing", v)
	}
	if got, want := get(MetricIngestVsCeiling), get(MetricIngestEventsPerS)/get(MetricPebbleCeilingEventsPS); got != want {
		t.Errorf("ingest_vs_ceiling = %v, want %v", got, want)
	}
	// docs/BENCHMARKS.md: the pipeline against its slowest stage.
	limit := min(get(MetricPebbleCeilingEventsPS), get(MetricMemoryIngestEventsPS))
	if got, want := get(MetricIngestVsLimit), get(MetricIngestEventsPerS)/limit; got != want {
		t.Errorf("ingest_vs_limit = %v, want %v", got, want)
	}
	// Issue 25: durable ingest against in-memory apply.
	if got, want := get(MetricIngestVsMemory), get(MetricIngestEventsPerS)/get(MetricMemoryIngestEventsPS); got != want {
		t.Errorf("ingest_vs_memory = %v, want %v", got, want)
	}
	if get(MetricLoadedQueries) < 1 {
		t.Error("no query was timed under load")
	}
	// Issue 24's fleet-scale metrics: shares are shares, the sample is the whole (small) stream,
	// the collector loop completed a cycle, and the process has a peak.
	for _, name := range []string{MetricGCCPUShare, MetricGCBusyShare, MetricGCCPUShareIngest,
		MetricGCCPUShareLoaded, MetricGCCPUShareRestart, MetricGCCPUShareMemoryIngest, MetricGCCPUShareCeiling} {
		if v := get(name); v < 0 || v > 1 {
			t.Errorf("%s = %v, want a share in [0, 1]", name, v)
		}
	}
	if n := len(nonEmpty(want.Queries)); get(MetricQueries) != float64(n) || get(MetricSampledQueries) != float64(n) {
		t.Errorf("queries = %v of %v, want all %d", get(MetricQueries), get(MetricSampledQueries), n)
	}
	if get(MetricFindMatchesGCRunningGCs) < 1 {
		t.Error("no collection completed beside the gc-running pass")
	}
	for _, name := range []string{MetricFindMatchesGCOffP99, MetricFindMatchesGCRunningP99, MetricHeapAtEnd, MetricRunSeconds, MetricPeakRSS} {
		if v := get(name); v <= 0 {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
}

// With NoCeiling the run measures everything but baseline (b) and the ratios to it.
func TestRunNoCeiling(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // what earlier tests left is theirs
	rep, err := Run(context.Background(), Options{
		Requests: smallTrace(t, 40), Workload: workload.WorkloadOptions{Workers: 4, CacheBlocks: 16},
		Durability: wal.NoSync, Lanes: 1, LoadedMax: time.Second, Queries: 5, NoCeiling: true,
		DataDir: t.TempDir(), Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{MetricPebbleCeilingEventsPS, MetricIngestVsCeiling, MetricIngestVsLimit, MetricGCCPUShareCeiling} {
		if v, ok := rep.Get(name); ok {
			t.Errorf("%s = %v without the ceiling", name, v)
		}
	}
	for _, name := range []string{MetricIngestVsMemory, MetricMemoryIngestBlocksPerS, MetricRestartSeconds} {
		if _, ok := rep.Get(name); !ok {
			t.Errorf("%s missing", name)
		}
	}
	if v, _ := rep.Get(MetricQueries); v != 5 {
		t.Errorf("queries = %v, want the sample of 5", v)
	}
}

func TestRunRefusesAUsedDataDir(t *testing.T) {
	dir := t.TempDir()
	reqs := smallTrace(t, 20)
	o := Options{Requests: reqs, Workload: workload.WorkloadOptions{Workers: 2}, Durability: wal.NoSync, Lanes: 1,
		DataDir: dir, LoadedMax: time.Second, Logger: quiet()}
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), o); !errors.Is(err, ErrDataDirInUse) {
		t.Fatalf("second run on the same dir: %v, want ErrDataDirInUse", err)
	}
}

func TestRunOptions(t *testing.T) {
	reqs := smallTrace(t, 5)
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"no workload", Options{}},
		{"two workloads", Options{Requests: reqs, TracePath: "x"}},
		{"negative batch", Options{Requests: reqs, Batch: -1}},
		{"negative producers", Options{Requests: reqs, Producers: -2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Run(context.Background(), tc.o); !errors.Is(err, ErrOptions) {
				t.Fatalf("err = %v, want ErrOptions", err)
			}
		})
	}
}

func TestRunCancelled(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // what earlier tests left is theirs
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Options{Requests: smallTrace(t, 50), Workload: workload.WorkloadOptions{Workers: 4},
		Durability: wal.NoSync, Logger: quiet()})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func sc(w uint64, score uint32, size uint64) index.Score {
	return index.Score{WorkerID: w, Score: score, TreeSize: size}
}

func TestCompareScores(t *testing.T) {
	base := []index.Score{sc(1, 3, 10), sc(2, 2, 5), sc(3, 1, 7)}
	for _, tc := range []struct {
		name   string
		after  []index.Score
		detail string // "" = equal
	}{
		{"identical", slices.Clone(base), ""},
		{"score lower", []index.Score{sc(1, 3, 10), sc(2, 1, 5), sc(3, 1, 7)}, "rank 2/0 scores 2 before the restart, 1 after"},
		{"tree size", []index.Score{sc(1, 3, 10), sc(2, 2, 6), sc(3, 1, 7)}, "rank 2/0 tree_size 5 before the restart, 6 after"},
		{"other rank", []index.Score{sc(1, 3, 10), sc(4, 2, 5), sc(3, 1, 7)}, "answer 1 is rank 2/0 (score 2) before the restart, rank 4/0 (score 2) after"},
		{"rank missing", base[:2], "3 ranks scored before the restart, 2 after; first missing: rank 3/0 (score 1)"},
		{"rank extra", append(slices.Clone(base), sc(9, 1, 1)), "3 ranks scored before the restart, 4 after; first extra: rank 9/0 (score 1)"},
		{"nothing after", nil, "3 ranks scored before the restart, 0 after; first missing: rank 1/0 (score 3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CompareScores(7, []uint64{1, 2, 3}, base, tc.after)
			if tc.detail == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			var me *MismatchError
			if !errors.Is(err, ErrScoresDiffer) || !errors.As(err, &me) {
				t.Fatalf("err = %v, want a *MismatchError wrapping ErrScoresDiffer", err)
			}
			if me.Detail != tc.detail || me.Query != 7 {
				t.Errorf("query %d, detail %q; want query 7, %q", me.Query, me.Detail, tc.detail)
			}
			if !strings.Contains(err.Error(), "query 7 (3 blocks)") {
				t.Errorf("message %q does not name the query", err)
			}
		})
	}
}

// TestCompareAllCatchesALostBlock is stage 4's check on real indexes: the rebuilt index lost one
// block, and the first query that reaches it fails the run.
func TestCompareAllCatchesALostBlock(t *testing.T) {
	wl, err := workload.Generate(smallTrace(t, 60), 1, workload.WorkloadOptions{Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	before, after := index.New(index.Options{}), index.New(index.Options{})
	for i := range wl.Events {
		before.Apply(&wl.Events[i])
		after.Apply(&wl.Events[i])
	}
	qs := nonEmpty(wl.Queries)
	if err := compareAll(context.Background(), wl.Queries, qs, before, after); err != nil {
		t.Fatalf("identical indexes differ: %v", err)
	}
	// Drop the deepest block of the last Stored event from the rebuilt index.
	var lost event.RouterEvent
	for i := len(wl.Events) - 1; i >= 0; i-- {
		if ev := wl.Events[i]; ev.Kind == event.KindStored {
			lost = event.Removed(ev.Rank(), ev.EventID+1_000_000, ev.Blocks[len(ev.Blocks)-1].BlockHash)
			break
		}
	}
	if res := after.Apply(&lost); res.Status != index.StatusOK {
		t.Fatalf("removing %v: %v", lost, res.Status)
	}
	err = compareAll(context.Background(), wl.Queries, qs, before, after)
	var me *MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("err = %v, want a *MismatchError", err)
	}
	if !strings.Contains(me.Detail, "before the restart") {
		t.Errorf("detail %q", me.Detail)
	}
}

func TestPercentile(t *testing.T) {
	lat := make([]time.Duration, 1000)
	for i := range lat {
		lat[i] = time.Duration(i + 1)
	}
	for _, tc := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{lat[:1], 0.999, 1},
		{lat, 0.5, 500},
		{lat, 0.99, 990},
		{lat, 0.999, 999},
		{lat, 1, 1000},
		{lat[:10], 0.99, 10},
		{lat[:10], 0.5, 5},
	} {
		if got := Percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("Percentile(%d values, %v) = %v, want %v", len(tc.in), tc.p, got, tc.want)
		}
	}
}

// TestSplitKeepsRankOrder: every rank lands on exactly one producer, which sees that rank's
// events in stream order; nothing is lost or duplicated; ranks spread round robin in order of
// first appearance; and where the chunks of the stream end changes nothing.
func TestSplitKeepsRankOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(t, "producers")
		ranks := rapid.IntRange(1, 10).Draw(t, "ranks")
		evs := make([]event.RouterEvent, rapid.IntRange(0, 80).Draw(t, "events"))
		next := map[uint64]uint64{}
		var order []uint64 // workers in order of first appearance
		for i := range evs {
			w := uint64(rapid.IntRange(0, ranks-1).Draw(t, "worker"))
			if next[w] == 0 {
				order = append(order, w)
			}
			next[w]++
			evs[i] = event.Cleared(event.Rank{WorkerID: w}, next[w])
		}
		whole := newSplit(n)
		whole.add(evs)
		chunked := newSplit(n)
		for rest := evs; len(rest) > 0; {
			k := rapid.IntRange(1, len(rest)).Draw(t, "chunk")
			chunked.add(rest[:k])
			rest = rest[k:]
		}
		if !reflect.DeepEqual(whole.queues, chunked.queues) {
			t.Fatalf("chunked split %v, whole %v", chunked.queues, whole.queues)
		}
		owner := map[uint64]int{}
		total := 0
		for p, part := range whole.queues {
			last := map[uint64]uint64{}
			for _, ev := range part {
				if o, ok := owner[ev.WorkerID]; ok && o != p {
					t.Fatalf("worker %d on parts %d and %d", ev.WorkerID, o, p)
				}
				owner[ev.WorkerID] = p
				if ev.EventID != last[ev.WorkerID]+1 {
					t.Fatalf("worker %d: event %d after %d", ev.WorkerID, ev.EventID, last[ev.WorkerID])
				}
				last[ev.WorkerID] = ev.EventID
			}
			total += len(part)
		}
		if total != len(evs) {
			t.Fatalf("%d events in parts, %d in the stream", total, len(evs))
		}
		for i, w := range order {
			if owner[w] != i%n {
				t.Fatalf("worker %d (rank %d to appear) on producer %d, want %d", w, i, owner[w], i%n)
			}
		}
	})
}

func TestShiftedDisjoint(t *testing.T) {
	evs := []event.RouterEvent{event.Cleared(event.Rank{WorkerID: 3}, 1), event.Cleared(event.Rank{WorkerID: 0, DPRank: 2}, 1)}
	once := false
	src := shifted(func() ([]event.RouterEvent, bool) {
		if once {
			return nil, false
		}
		once = true
		return evs, true
	}, 4)
	got, ok := src()
	if !ok || got[0].WorkerID != 7 || got[1].WorkerID != 4 || got[1].DPRank != 2 {
		t.Fatalf("shifted = %+v", got)
	}
	if evs[0].WorkerID != 3 {
		t.Fatal("input modified")
	}
	if got, ok := src(); ok || len(got) != 0 {
		t.Fatalf("past the end: %v, %v", got, ok)
	}
}
