package engine

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// bucketOf is the histogram bucket of a predicted − realized difference.
func bucketOf(d int64) int {
	i, _ := slices.BinarySearch(ErrorBounds, d)
	return i
}

func onlyAccuracy(t *testing.T, e *Engine) Accuracy {
	t.Helper()
	as := e.Accuracies()
	if len(as) != 1 {
		t.Fatalf("accuracies: %+v, want one partition", as)
	}
	return as[0]
}

// TestOutcomesOfAnExactIndexAreExact: when the engine reused what the index holds, every outcome
// is exact: zero over- and under-predictions, a histogram at 0 only.
func TestOutcomesOfAnExactIndexAreExact(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), newClock(), 0)
	defer e.Close()
	fill(t, e, leased, neverLease) // each holds 10, 20, 30 (block size 16)
	n, err := e.RecordOutcomes([]Outcome{
		{Key: defKey, Rank: leased, Hashes: []uint64{10, 20, 30, 40}, CachedTokens: 48},
		{Key: defKey, Rank: neverLease, Hashes: []uint64{10, 20}, CachedTokens: 32},
		{Key: defKey, Rank: leased, Hashes: []uint64{99}, CachedTokens: 0},
		{Key: defKey, Rank: leased, Hashes: []uint64{10, 20, 30}, CachedTokens: 47}, // a partial block is no hit
	})
	if err != nil || n != 4 {
		t.Fatalf("RecordOutcomes: %d %v", n, err)
	}
	a := onlyAccuracy(t, e)
	want := Accuracy{Key: defKey, BlockSize: 16, AccuracyCounts: AccuracyCounts{Outcomes: 4, Exact: 3, Predicted: 8, Realized: 7, Over: 1, OverBlocks: 1, ErrorSum: 1}}
	hist := a.Histogram
	a.Histogram = nil
	if len(a.BySource) != 1 || a.BySource[0].Source != SourceLibrary || a.BySource[0].Outcomes != 4 {
		t.Fatalf("by source %+v, want all 4 from the library", a.BySource)
	}
	a.BySource = nil
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("accuracy %+v, want %+v", a, want)
	}
	if hist[bucketOf(0)] != 3 || hist[bucketOf(1)] != 1 {
		t.Fatalf("histogram %v", hist)
	}
}

// TestDroppedEventsShowAsMispredictions: a rank whose Removed events were dropped over-predicts
// (the index promises blocks the engine no longer holds); one whose Stored events were dropped
// under-predicts; both are counted with the blocks they were off by.
func TestDroppedEventsShowAsMispredictions(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), newClock(), 0)
	defer e.Close()
	fill(t, e, leased) // the index: 10, 20, 30 on worker 1
	// Worker 1 evicted 20 and 30, but the Removed events never arrived: it reuses one block.
	// Worker 2 holds 10, 20, 30 too, but the index only saw its first Stored.
	if _, err := e.Ingest(context.Background(), defKey, []event.RouterEvent{
		event.Stored(neverLease, 1, nil, event.Block{BlockHash: 100, TokensHash: 10})}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.RecordOutcomes([]Outcome{
		{Key: defKey, Rank: leased, Hashes: []uint64{10, 20, 30}, CachedTokens: 16},
		{Key: defKey, Rank: neverLease, Hashes: []uint64{10, 20, 30}, CachedTokens: 48},
	}); err != nil {
		t.Fatal(err)
	}
	a := onlyAccuracy(t, e)
	if a.Over != 1 || a.OverBlocks != 2 || a.Under != 1 || a.UnderBlocks != 2 || a.Exact != 0 || a.Predicted != 4 || a.Realized != 4 {
		t.Fatalf("accuracy %+v", a)
	}
	if a.Histogram[bucketOf(2)] != 1 || a.Histogram[bucketOf(-2)] != 1 {
		t.Fatalf("histogram %v", a.Histogram)
	}
}

// TestOutcomeOfAStaleRankPredictsNothing: the prediction is what the index answers now, so a
// stale rank (left out of answers) predicts 0 blocks.
func TestOutcomeOfAStaleRankPredictsNothing(t *testing.T) {
	c := newClock()
	e := openTestEngine(t, vfs.NewMem(), c, 0)
	defer e.Close()
	fill(t, e, leased)
	if _, err := e.SetLease(context.Background(), 1, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	if _, err := e.RecordOutcomes([]Outcome{{Key: defKey, Rank: leased, Hashes: []uint64{10, 20, 30}, CachedTokens: 48}}); err != nil {
		t.Fatal(err)
	}
	if a := onlyAccuracy(t, e); a.Predicted != 0 || a.Under != 1 || a.UnderBlocks != 3 {
		t.Fatalf("accuracy %+v", a)
	}
}

// TestOutcomesByTokens: tokens hash with the partition's block size and salt, as find_matches_
// for_request does.
func TestOutcomesByTokens(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), newClock(), 0)
	defer e.Close()
	toks := make([]uint32, 32)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	hs := event.BlockHashes(toks, 16, "lora-a", "")
	p := uint64(1)
	if _, err := e.Ingest(context.Background(), defKey, []event.RouterEvent{
		event.Stored(leased, 1, nil, event.Block{BlockHash: 1, TokensHash: hs[0]}),
		event.Stored(leased, 2, &p, event.Block{BlockHash: 2, TokensHash: hs[1]})}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.RecordOutcomes([]Outcome{
		{Key: defKey, Rank: leased, Tokens: toks, Lora: "lora-a", CachedTokens: 32},
		{Key: defKey, Rank: leased, Tokens: toks, CachedTokens: 0}, // no LoRA: other hashes, nothing held
	}); err != nil {
		t.Fatal(err)
	}
	if a := onlyAccuracy(t, e); a.Exact != 2 || a.Predicted != 2 {
		t.Fatalf("accuracy %+v", a)
	}
}

// TestBadOutcomesRecordNothing: an unknown partition or rank, neither or both of hashes and
// tokens, tokens that are not whole blocks and a cached prefix longer than the request refuse
// the whole batch, naming the outcome.
func TestBadOutcomesRecordNothing(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), newClock(), 0)
	defer e.Close()
	fill(t, e, leased)
	good := Outcome{Key: defKey, Rank: leased, Hashes: []uint64{10}, CachedTokens: 16}
	for name, bad := range map[string]Outcome{
		"unknown rank":         {Key: defKey, Rank: event.Rank{WorkerID: 7}, Hashes: []uint64{10}},
		"unknown dp rank":      {Key: defKey, Rank: event.Rank{WorkerID: 1, DPRank: 5}, Hashes: []uint64{10}},
		"unknown partition":    {Key: partition.KeyOf("nope", "", ""), Rank: leased, Hashes: []uint64{10}},
		"neither":              {Key: defKey, Rank: leased},
		"both":                 {Key: defKey, Rank: leased, Hashes: []uint64{10}, Tokens: make([]uint32, 16)},
		"tokens not blocks":    {Key: defKey, Rank: leased, Tokens: make([]uint32, 17)},
		"cached beyond prompt": {Key: defKey, Rank: leased, Hashes: []uint64{10}, CachedTokens: 32},
	} {
		n, err := e.RecordOutcomes([]Outcome{good, bad})
		var oe *OutcomeError
		if !errors.Is(err, ErrBadOutcome) || !errors.As(err, &oe) || oe.Index != 1 || n != 0 {
			t.Errorf("%s: %d %v", name, n, err)
		}
	}
	if as := e.Accuracies(); len(as) != 0 {
		t.Fatalf("a refused batch recorded %+v", as)
	}
}

// TestWhatOfAccuracySurvivesARestart: outcomes are never written (no fsync), so after a
// restart — clean or a crash — the counts start at zero; what outcomes are compared against and
// counted by (ranks, leases, partitions, here a non-default one, and the workers' source kinds,
// durable with their placement) survives, so the first outcome after it counts as before.
func TestWhatOfAccuracySurvivesARestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		fs := vfs.NewCrashableMem()
		c := newClock()
		e := openSourceEngine(t, fs, c, 0)
		ctx := context.Background()
		feedFrom(t, e, SourceZMQ, event.Rank{WorkerID: 5}, 1)
		if _, err := e.SetLease(ctx, 5, time.Hour, nil); err != nil {
			t.Fatal(err)
		}
		o := Outcome{Key: srcKey, Rank: event.Rank{WorkerID: 5}, Hashes: []uint64{10}, CachedTokens: 16}
		if _, err := e.RecordOutcomes([]Outcome{o, o}); err != nil {
			t.Fatal(err)
		}
		if err := e.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		reopen := fs
		if crash {
			reopen = fs.CrashClone(vfs.CrashCloneCfg{}) // kill -9: only what was synced
		}
		err := e.Close()
		if err != nil {
			t.Fatal(err)
		}
		e = openSourceEngine(t, reopen, c, 0)
		if as := e.Accuracies(); len(as) != 0 {
			t.Fatalf("crash %v: outcomes survived: %+v", crash, as)
		}
		if got := e.doorOf(5); got != SourceZMQ {
			t.Fatalf("crash %v: source kind %v after the restart", crash, got)
		}
		if _, st := e.leaseState(5); st != LeaseLive {
			t.Fatalf("crash %v: lease %v after the restart", crash, st)
		}
		if _, err := e.RecordOutcomes([]Outcome{o}); err != nil {
			t.Fatal(err)
		}
		as := e.Accuracies()
		if len(as) != 1 || as[0].Outcomes != 1 || as[0].Exact != 1 || len(as[0].BySource) != 1 || as[0].BySource[0].Source != SourceZMQ {
			t.Fatalf("crash %v: after the restart %+v", crash, as)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
