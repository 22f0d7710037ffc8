package approx

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
)

// logLane is a Lane over a real log: fn's batch is committed, then applied (one lane for all).
type logLane struct {
	mu  sync.Mutex
	log *wal.Log
}

func (l *logLane) Exec(ctx context.Context, _ event.Rank, fn func(b *wal.Batch) func()) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.log.NewBatch()
	defer b.Close()
	apply := fn(b)
	if err := l.log.Commit(ctx, b); err != nil {
		return err
	}
	if apply != nil {
		apply()
	}
	return nil
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time              { return c.t }
func (c *clock) advance(d time.Duration)     { c.t = c.t.Add(d) }
func quiet() *slog.Logger                    { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func rk(w uint64) event.Rank                 { return event.Rank{WorkerID: w} }
func dec(w uint64, local ...uint64) Decision { return Decision{Rank: rk(w), LocalHashes: local} }

type rig struct {
	t   *testing.T
	fs  vfs.FS
	st  *store.Store
	log *wal.Log
	clk *clock
	s   *Set
}

func newRig(t *testing.T, opts Options) *rig {
	g := &rig{t: t, fs: vfs.NewMem(), clk: &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	g.open(opts)
	t.Cleanup(func() { _ = g.st.Close() })
	return g
}

func (g *rig) open(opts Options) {
	st, err := store.Open("data", store.Options{FS: g.fs, Logger: quiet()})
	if err != nil {
		g.t.Fatal(err)
	}
	l, err := wal.Open(st, wal.Options{Logger: quiet()})
	if err != nil {
		g.t.Fatal(err)
	}
	opts.Now, opts.Logger = g.clk.now, quiet()
	g.st, g.log, g.s = st, l, New(&logLane{log: l}, opts)
}

func (g *rig) record(d Decision) time.Time {
	g.t.Helper()
	_, dl, err := g.s.Record(context.Background(), d)
	if err != nil {
		g.t.Fatal(err)
	}
	return dl
}

func (g *rig) score(w uint64, hashes ...uint64) uint32 {
	for _, sc := range g.s.Scores(nil, 0, hashes, false) {
		if sc.WorkerID == w {
			return sc.Score
		}
	}
	return 0
}

func (g *rig) flush() {
	g.t.Helper()
	if err := g.s.Flush(context.Background()); err != nil {
		g.t.Fatal(err)
	}
}

// TestStaggeredRanksExpireAtTheirOwnDeadlines ports Dynamo's
// test_worker_expiry_queue_drains_staggered_workers: TTL 10 s, rank 1 recorded at t0 and rank 2
// at t0+5 s; at +10 s only rank 1 drains, at +15 s rank 2.
func TestStaggeredRanksExpireAtTheirOwnDeadlines(t *testing.T) {
	g := newRig(t, Options{TTL: 10 * time.Second})
	g.record(dec(1, 100, 101))
	g.clk.advance(5 * time.Second)
	g.record(dec(2, 100))
	g.clk.advance(5 * time.Second)
	g.flush()
	if g.score(1, 100, 101) != 0 || g.score(2, 100) != 1 {
		t.Fatalf("at +10 s: rank 1 scores %d (want 0), rank 2 %d (want 1)", g.score(1, 100, 101), g.score(2, 100))
	}
	g.clk.advance(5 * time.Second)
	g.flush()
	if g.score(2, 100) != 0 || g.s.Blocks(0) != 0 {
		t.Fatalf("at +15 s: rank 2 scores %d, %d side blocks left", g.score(2, 100), g.s.Blocks(0))
	}
	if g.s.Expired.Load() != 3 {
		t.Fatalf("expired %d, want 3", g.s.Expired.Load())
	}
}

// TestRefreshMovesTheExpiry ports test_worker_expiry_queue_ignores_stale_global_entries: a
// re-record at +5 s means nothing drains at +10 s; the block drains at +15 s.
func TestRefreshMovesTheExpiry(t *testing.T) {
	g := newRig(t, Options{TTL: 10 * time.Second})
	g.record(dec(1, 100))
	g.clk.advance(5 * time.Second)
	g.record(dec(1, 100))
	g.clk.advance(5 * time.Second)
	g.flush()
	if g.score(1, 100) != 1 {
		t.Fatal("the refreshed block drained at its old deadline")
	}
	g.clk.advance(5 * time.Second)
	g.flush()
	if g.score(1, 100) != 0 {
		t.Fatal("the refreshed block did not drain at its new deadline")
	}
}

// TestExpiryQueueStaysBoundedUnderChurn ports test_worker_expiry_heap_rebuilds_under_churn: 11
// re-records of one block leave one entry in the deadline order, not 11.
func TestExpiryQueueStaysBoundedUnderChurn(t *testing.T) {
	g := newRig(t, Options{TTL: 10 * time.Second})
	for range 11 {
		g.record(dec(1, 100))
		g.clk.advance(time.Second)
	}
	g.s.mu.Lock()
	n := g.s.parts[0].order.Len()
	g.s.mu.Unlock()
	if n != 1 {
		t.Fatalf("deadline order holds %d entries, want 1", n)
	}
}

// TestDeadlinesRoundUpToBuckets: a deadline is rounded up to 100 ms; TTL 0 expires at once.
func TestDeadlinesRoundUpToBuckets(t *testing.T) {
	g := newRig(t, Options{TTL: 10 * time.Second})
	g.clk.advance(1234 * time.Millisecond)
	if dl := g.record(dec(1, 100)); !dl.Equal(g.clk.t.Add(10*time.Second + 66*time.Millisecond)) {
		t.Fatalf("deadline %v, want rounded up to %v", dl, g.clk.t.Add(10*time.Second+66*time.Millisecond))
	}
	z := newRig(t, Options{TTLIsZero: true})
	z.record(dec(1, 100))
	z.flush()
	if z.score(1, 100) != 0 {
		t.Fatal("TTL 0: the block is still there after a flush at the same instant")
	}
}

// TestMixedClusterTakesTheMax (docs/CONTRACT.md §8): a rank with event-fed score 2 and a decision of 4 blocks
// answers 4, then 2 after the decision expired.
func TestMixedClusterTakesTheMax(t *testing.T) {
	g := newRig(t, Options{TTL: 10 * time.Second})
	q := []uint64{11, 12, 13, 14}
	events := []index.Score{{WorkerID: 1, Score: 2, TreeSize: 2}}
	g.record(dec(1, q...))
	got := Merge(nil, events, g.s.Scores(nil, 0, q, false))
	if len(got) != 1 || got[0].Score != 4 || got[0].TreeSize != 2 {
		t.Fatalf("mixed answer %+v, want score 4 (tree size of the event-fed tree, 2)", got)
	}
	g.clk.advance(11 * time.Second)
	g.flush()
	got = Merge(nil, events, g.s.Scores(nil, 0, q, false))
	if len(got) != 1 || got[0].Score != 2 {
		t.Fatalf("after expiry %+v, want score 2", got)
	}
}

// TestSizeBoundPrunesEarliestDeepestFirst (docs/CONTRACT.md §8): above max_blocks a partition prunes to
// ⌊0.8·max⌋, earliest deadline first, the deepest block first on equal deadlines.
func TestSizeBoundPrunesEarliestDeepestFirst(t *testing.T) {
	g := newRig(t, Options{TTL: 10 * time.Second, MaxBlocks: 10})
	g.record(dec(1, 1, 2, 3, 4)) // deadline D
	g.clk.advance(time.Second)
	g.record(dec(2, 1, 2, 3, 4)) // D+1s
	g.clk.advance(time.Second)
	g.record(dec(3, 1, 2)) // D+2s: 10 blocks, at the bound
	if g.s.Blocks(0) != 10 || g.s.Pruned.Load() != 0 {
		t.Fatalf("at the bound: %d blocks, %d pruned", g.s.Blocks(0), g.s.Pruned.Load())
	}
	g.clk.advance(time.Second)
	g.record(dec(4, 9)) // 11 > 10: prune to 8, i.e. 3 blocks: rank 1's deepest three
	if g.s.Blocks(0) != 8 || g.s.Pruned.Load() != 3 {
		t.Fatalf("after pruning: %d blocks (want 8), %d pruned (want 3)", g.s.Blocks(0), g.s.Pruned.Load())
	}
	want := map[uint64]uint32{1: 1, 2: 4, 3: 2, 4: 0}
	for w, sc := range want {
		if got := g.score(w, 1, 2, 3, 4); got != sc {
			t.Errorf("rank %d scores %d after pruning, want %d", w, got, sc)
		}
	}
}

// TestRecordedDecisionsSurviveARestart: decisions come back from the store with their deadlines;
// what expired while the process was down is removed (and counted) at load.
func TestRecordedDecisionsSurviveARestart(t *testing.T) {
	g := newRig(t, Options{TTL: 10 * time.Second})
	g.record(dec(1, 1, 2, 3))
	g.clk.advance(5 * time.Second)
	g.record(dec(2, 7, 8))
	if err := g.st.Close(); err != nil {
		t.Fatal(err)
	}
	g.clk.advance(7 * time.Second) // rank 1's blocks expired while down; rank 2's did not
	g.open(Options{TTL: 10 * time.Second})
	kept, expired, err := g.s.Load(context.Background(), g.log)
	if err != nil || kept != 2 || expired != 3 {
		t.Fatalf("load: kept %d expired %d err %v; want 2, 3", kept, expired, err)
	}
	if g.score(1, 1, 2, 3) != 0 || g.score(2, 7, 8) != 2 {
		t.Fatalf("after restart: rank 1 %d (want 0), rank 2 %d (want 2)", g.score(1, 1, 2, 3), g.score(2, 7, 8))
	}
	n := 0
	_ = g.log.ApproxEntries(func(*wal.ApproxEntry) error { n++; return nil })
	if n != 2 {
		t.Fatalf("%d records on disk after the load, want 2 (the expired ones removed)", n)
	}
	g.clk.advance(4 * time.Second)
	g.flush()
	if g.score(2, 7, 8) != 0 || !slices.Equal(g.s.Ranks(), nil) {
		t.Fatalf("the reloaded blocks did not expire at their deadline")
	}
}

// TestBadDecisionsAreRefused: no blocks, or sequence hashes of another length.
func TestBadDecisionsAreRefused(t *testing.T) {
	g := newRig(t, Options{})
	for _, d := range []Decision{{Rank: rk(1)}, {Rank: rk(1), LocalHashes: []uint64{1, 2}, SeqHashes: []uint64{9}}} {
		if _, _, err := g.s.Record(context.Background(), d); err == nil {
			t.Errorf("%+v was recorded", d)
		}
	}
	if g.s.Blocks(0) != 0 {
		t.Fatal("a refused decision wrote something")
	}
}

// TestUnreachableEntriesAreRemovedAtLoad: a record whose parent is gone (its parent expired
// first after a clock step) cannot be reached; the load removes it from the store and counts it
// with the expired ones instead of skipping it at every start.
func TestUnreachableEntriesAreRemovedAtLoad(t *testing.T) {
	g := newRig(t, Options{TTL: 10 * time.Second})
	b := g.log.NewBatch()
	b.PutApprox(&wal.ApproxEntry{Rank: rk(1), BlockHash: 2, TokensHash: 2, Position: 1, HasParent: true, ParentHash: 1,
		Deadline: g.clk.t.Add(time.Minute)})
	if err := g.log.Commit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	b.Close()
	kept, expired, err := g.s.Load(context.Background(), g.log)
	if err != nil || kept != 0 || expired != 1 {
		t.Fatalf("load: kept %d expired %d err %v; want 0, 1", kept, expired, err)
	}
	n := 0
	_ = g.log.ApproxEntries(func(*wal.ApproxEntry) error { n++; return nil })
	if n != 0 || g.s.Blocks(0) != 0 {
		t.Fatalf("%d records on disk, %d side blocks after the load; want none", n, g.s.Blocks(0))
	}
}

// TestMergeTakesTheMaxPerRank (docs/CONTRACT.md §8, the max rule): a rank both the tree and the
// side index answer gets the higher of its two scores, whichever side holds it, and keeps its
// tree size; a rank only one side answers is kept as it is; the result is in the answer's order
// (score desc, worker_id, dp_rank asc).
func TestMergeTakesTheMaxPerRank(t *testing.T) {
	s := func(w uint64, dp uint32, score uint32, size uint64) index.Score {
		return index.Score{WorkerID: w, DPRank: dp, Score: score, TreeSize: size}
	}
	for _, c := range []struct {
		name         string
		events, side []index.Score
		want         []index.Score
	}{
		{"tree higher: the tree score wins",
			[]index.Score{s(1, 0, 5, 9)}, []index.Score{s(1, 0, 2, 0)}, []index.Score{s(1, 0, 5, 9)}},
		{"decision higher: the decision score wins, the tree size stays",
			[]index.Score{s(1, 0, 2, 9)}, []index.Score{s(1, 0, 4, 0)}, []index.Score{s(1, 0, 4, 9)}},
		{"equal scores",
			[]index.Score{s(1, 0, 3, 9)}, []index.Score{s(1, 0, 3, 0)}, []index.Score{s(1, 0, 3, 9)}},
		{"a lower decision does not reorder a higher tree score",
			[]index.Score{s(1, 0, 6, 6), s(2, 0, 5, 5)}, []index.Score{s(2, 0, 1, 0), s(1, 0, 2, 0)},
			[]index.Score{s(1, 0, 6, 6), s(2, 0, 5, 5)}},
		{"a higher decision reorders",
			[]index.Score{s(1, 0, 6, 6), s(2, 0, 5, 5)}, []index.Score{s(2, 0, 7, 0)},
			[]index.Score{s(2, 0, 7, 5), s(1, 0, 6, 6)}},
		{"same worker, other dp_rank: two ranks",
			[]index.Score{s(1, 0, 5, 5)}, []index.Score{s(1, 1, 2, 0)}, []index.Score{s(1, 0, 5, 5), s(1, 1, 2, 0)}},
		{"decision-only and tree-only ranks are kept, ties by worker_id",
			[]index.Score{s(3, 0, 2, 2)}, []index.Score{s(1, 0, 2, 0), s(3, 0, 1, 0)},
			[]index.Score{s(1, 0, 2, 0), s(3, 0, 2, 2)}},
		{"no decisions", []index.Score{s(1, 0, 5, 5)}, nil, []index.Score{s(1, 0, 5, 5)}},
		{"no events", nil, []index.Score{s(1, 0, 2, 0)}, []index.Score{s(1, 0, 2, 0)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			events := slices.Clone(c.events)
			got := Merge(nil, events, c.side)
			if !slices.Equal(got, c.want) {
				t.Fatalf("Merge(events %+v, side %+v) = %+v, want %+v", c.events, c.side, got, c.want)
			}
			if !slices.Equal(events, c.events) {
				t.Fatalf("Merge changed its events input: %+v", events)
			}
		})
	}
}
