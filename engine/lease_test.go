package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// clock is an injected clock tests move by hand.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

const testGrace = time.Minute

// openTestEngine opens and recovers an engine on fs's "data" with the injected clock, a grace of
// testGrace and a sweep that runs on its own only once, inside Recover (then every hour: tests
// call SweepLeases), unless sweep is set. A lease that ran out while the engine was down is thus
// swept before openTestEngine returns.
func openTestEngine(t *testing.T, fs vfs.FS, c *clock, sweep time.Duration) *Engine {
	t.Helper()
	return openTestEngineLog(t, fs, c, sweep, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// openTestEngineLog is openTestEngine logging to lg.
func openTestEngineLog(t *testing.T, fs vfs.FS, c *clock, sweep time.Duration, lg *slog.Logger) *Engine {
	t.Helper()
	if sweep == 0 {
		sweep = time.Hour
	}
	e, err := Open(Config{DataDir: "data", FS: fs, Lanes: 2, Now: c.Now, LeaseGrace: testGrace, LeaseSweep: sweep, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Recover(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return e
}

var (
	leased     = event.Rank{WorkerID: 1, DPRank: 0}
	leased1    = event.Rank{WorkerID: 1, DPRank: 1}
	neverLease = event.Rank{WorkerID: 2, DPRank: 0}
)

// fill stores the blocks of local hashes 10, 20, 30 (one chain) on each rank.
func fill(t *testing.T, e *Engine, ranks ...event.Rank) {
	t.Helper()
	for _, rk := range ranks {
		p := uint64(100)
		q := uint64(200)
		evs := []event.RouterEvent{
			event.Stored(rk, 1, nil, event.Block{BlockHash: 100, TokensHash: 10}),
			event.Stored(rk, 2, &p, event.Block{BlockHash: 200, TokensHash: 20}),
			event.Stored(rk, 3, &q, event.Block{BlockHash: 300, TokensHash: 30}),
		}
		if _, err := e.Ingest(context.Background(), defKey, evs); err != nil {
			t.Fatal(err)
		}
	}
}

// answered lists the ranks Find answers for the chain, in the answer's order.
func answered(e *Engine) []event.Rank {
	var out []event.Rank
	for _, s := range e.Find(nil, defKey, Query{Hashes: []uint64{10, 20, 30}}) {
		out = append(out, event.Rank{WorkerID: s.WorkerID, DPRank: s.DPRank})
	}
	return out
}

func deviceAnswered(e *Engine) []event.Rank {
	p, _ := e.Partitions().Lookup(defKey)
	var out []event.Rank
	for _, s := range e.queryDevice(nil, p, []uint64{10, 20, 30}) {
		out = append(out, s.Rank())
	}
	return out
}

func wantRanks(t *testing.T, what string, got []event.Rank, want ...event.Rank) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
}

// TestLeaseExpiredLeavesTheRankOutButKeepsItsState: past its deadline a leased worker's ranks
// leave every answer (Find and the device part Dynamo's /query reads), their state stays (status,
// blocks), a never-leased worker is untouched, and a renewal restores the ranks at once.
func TestLeaseExpiredLeavesTheRankOutButKeepsItsState(t *testing.T) {
	c := newClock()
	e := openTestEngine(t, vfs.NewMem(), c, 0)
	defer e.Close()
	fill(t, e, leased, leased1, neverLease)
	all := []event.Rank{leased, leased1, neverLease}
	wantRanks(t, "before any lease", answered(e), all...)

	l, err := e.SetLease(context.Background(), 1, 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Deadline.Equal(c.Now().Add(10*time.Second)) || !l.RemoveAt.Equal(l.Deadline.Add(testGrace)) {
		t.Fatalf("lease %+v", l)
	}
	wantRanks(t, "lease live", answered(e), all...)
	c.Advance(10*time.Second - 1)
	wantRanks(t, "a nanosecond before the deadline", answered(e), all...)
	if _, st := e.leaseState(1); st != LeaseLive {
		t.Fatalf("state %v before the deadline", st)
	}

	c.Advance(1)
	wantRanks(t, "at the deadline", answered(e), neverLease)
	wantRanks(t, "device scores at the deadline", deviceAnswered(e), neverLease)
	if _, st := e.leaseState(1); st != LeaseStale {
		t.Fatalf("state %v at the deadline", st)
	}
	if _, st := e.leaseState(2); st != LeaseNone {
		t.Fatalf("never-leased worker: state %v", st)
	}
	// top_k counts live ranks only.
	if got := e.Find(nil, defKey, Query{Hashes: []uint64{10}, TopK: 1}); len(got) != 1 || got[0].WorkerID != 2 {
		t.Fatalf("top_k 1 while worker 1 is stale: %+v", got)
	}
	for _, rk := range []event.Rank{leased, leased1} {
		st, ok := e.RankStatus(rk)
		if !ok || st.Last != 3 {
			t.Fatalf("stale rank %v lost its state: %+v %v", rk, st, ok)
		}
	}
	if w, r, err := e.SweepLeases(context.Background()); err != nil || w != 0 || r != 0 {
		t.Fatalf("sweep within the grace: %d workers %d ranks %v", w, r, err)
	}

	if _, err := e.SetLease(context.Background(), 1, 10*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	wantRanks(t, "renewed", answered(e), all...)
	wantRanks(t, "device scores renewed", deviceAnswered(e), all...)
}

// TestLeaseGraceRemovesTheWorkerDurably: once the deadline plus the grace passed, the sweep
// removes the worker's ranks as RemoveWorker does (log included: a reopen does not bring them
// back), drops the lease and counts it; the never-leased worker stays.
func TestLeaseGraceRemovesTheWorkerDurably(t *testing.T) {
	c := newClock()
	fs := vfs.NewMem()
	e := openTestEngine(t, fs, c, 0)
	fill(t, e, leased, leased1, neverLease)
	if _, err := e.SetLease(context.Background(), 1, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second + testGrace - 1)
	if w, _, _ := e.SweepLeases(context.Background()); w != 0 {
		t.Fatal("removed before the grace ended")
	}
	c.Advance(1)
	w, r, err := e.SweepLeases(context.Background())
	if err != nil || w != 1 || r != 2 {
		t.Fatalf("sweep after the grace: %d workers %d ranks %v, want 1 and 2", w, r, err)
	}
	if got := e.LeaseCounters(); got != (LeaseCounters{Removed: 1, RemovedRanks: 2}) {
		t.Fatalf("counters %+v", got)
	}
	if _, st := e.leaseState(1); st != LeaseNone {
		t.Fatalf("lease after the removal: %v", st)
	}
	if got := e.RanksOfWorker(1); len(got) != 0 {
		t.Fatalf("worker 1 still has ranks %v", got)
	}
	wantRanks(t, "after the removal", answered(e), neverLease)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTestEngine(t, fs, c, 0)
	defer e.Close()
	if got := e.RanksOfWorker(1); len(got) != 0 {
		t.Fatalf("worker 1 back after a reopen: %v", got)
	}
	if len(e.leases()) != 0 {
		t.Fatalf("leases after a reopen: %+v", e.leases())
	}
	wantRanks(t, "reopened", answered(e), neverLease)
	// The worker may come back as a new one (no lease, another partition even).
	if _, err := e.Ingest(context.Background(), partition.KeyOf("m", "g", ""), []event.RouterEvent{
		event.Stored(leased, 1, nil, event.Block{BlockHash: 100, TokensHash: 10})}); err != nil {
		t.Fatalf("the removed worker joins another partition: %v", err)
	}
}

// TestLeaseDeadlinesSurviveARestart: deadlines are durable wall-clock instants: a restart keeps
// a live lease live and a stale one stale, and time spent down counts (down past the deadline:
// stale at once; past the grace: removed by the first sweep, which runs at start).
func TestLeaseDeadlinesSurviveARestart(t *testing.T) {
	c := newClock()
	fs := vfs.NewMem()
	e := openTestEngine(t, fs, c, 0)
	fill(t, e, leased, neverLease, event.Rank{WorkerID: 3})
	for w, ttl := range map[uint64]time.Duration{1: 10 * time.Second, 3: time.Hour} {
		if _, err := e.SetLease(context.Background(), w, ttl, nil); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := e.leaseState(1)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	c.Advance(5 * time.Second) // down, within the ttl
	e = openTestEngine(t, fs, c, 0)
	if got, st := e.leaseState(1); st != LeaseLive || !got.Deadline.Equal(want.Deadline) || got.TTL != want.TTL {
		t.Fatalf("after a restart: %+v %v, want %+v live", got, st, want)
	}
	wantRanks(t, "restarted within the ttl", answered(e), leased, neverLease, event.Rank{WorkerID: 3})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	c.Advance(10 * time.Second) // down past the deadline
	e = openTestEngine(t, fs, c, 0)
	if _, st := e.leaseState(1); st != LeaseStale {
		t.Fatalf("down past the deadline: %v", st)
	}
	wantRanks(t, "restarted past the deadline", answered(e), neverLease, event.Rank{WorkerID: 3})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	c.Advance(testGrace) // down past the grace: the sweep at start removes worker 1
	e = openTestEngine(t, fs, c, time.Millisecond)
	defer e.Close()
	deadline := time.Now().Add(5 * time.Second)
	for len(e.RanksOfWorker(1)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sweep at start did not remove worker 1")
		}
		time.Sleep(time.Millisecond)
	}
	if _, st := e.leaseState(3); st != LeaseLive {
		t.Fatalf("worker 3's hour-long lease: %v", st)
	}
	wantRanks(t, "restarted past the grace", answered(e), neverLease, event.Rank{WorkerID: 3})
}

// TestLeaseSurvivesACrash: an acknowledged lease is durable (a crash keeps only synced writes).
func TestLeaseSurvivesACrash(t *testing.T) {
	c := newClock()
	mem := vfs.NewCrashableMem()
	e := openTestEngine(t, mem, c, 0)
	fill(t, e, leased)
	if _, err := e.SetLease(context.Background(), 1, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = e.Close()
	c.Advance(2 * time.Second)
	e2 := openTestEngine(t, crashed, c, 0)
	defer e2.Close()
	if _, st := e2.leaseState(1); st != LeaseStale {
		t.Fatalf("after a crash: %v, want the lease kept (and stale by now)", st)
	}
	wantRanks(t, "after a crash", answered(e2))
}

// TestEndLeaseRestoresANeverLeasedWorker: ending a lease (even an expired one) makes the worker
// one that never took a lease: its ranks answer again and the sweep leaves it alone.
func TestEndLeaseRestoresANeverLeasedWorker(t *testing.T) {
	c := newClock()
	e := openTestEngine(t, vfs.NewMem(), c, 0)
	defer e.Close()
	fill(t, e, leased)
	if _, err := e.SetLease(context.Background(), 1, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Second)
	wantRanks(t, "stale", answered(e))
	if ok, err := e.endLease(context.Background(), 1); !ok || err != nil {
		t.Fatalf("EndLease: %v %v", ok, err)
	}
	if ok, err := e.endLease(context.Background(), 1); ok || err != nil {
		t.Fatalf("EndLease again: %v %v", ok, err)
	}
	wantRanks(t, "ended", answered(e), leased)
	c.Advance(2 * testGrace)
	if w, _, _ := e.SweepLeases(context.Background()); w != 0 {
		t.Fatal("the sweep removed a worker whose lease was ended")
	}
}

// TestSetLeaseRefusals: a negative or too long ttl, and a partition the worker is not of, are
// refused and record nothing (ttl 0 ends a lease: TestEndLeaseRestoresANeverLeasedWorker).
func TestSetLeaseRefusals(t *testing.T) {
	c := newClock()
	e := openTestEngine(t, vfs.NewMem(), c, 0)
	defer e.Close()
	fill(t, e, leased)
	for _, ttl := range []time.Duration{-time.Second, MaxLeaseTTL + 1} {
		if _, err := e.SetLease(context.Background(), 1, ttl, nil); !errors.Is(err, ErrBadLease) {
			t.Fatalf("ttl %v: %v", ttl, err)
		}
	}
	other := partition.KeyOf("other", "", "")
	if _, err := e.SetLease(context.Background(), 1, time.Second, &other); !errors.Is(err, partition.ErrWorkerElsewhere) {
		t.Fatalf("another partition: %v", err)
	}
	if len(e.leases()) != 0 {
		t.Fatalf("a refusal recorded a lease: %+v", e.leases())
	}
	// Its own partition, and a worker not seen yet, are fine.
	def := defKey
	if _, err := e.SetLease(context.Background(), 1, time.Second, &def); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SetLease(context.Background(), 99, time.Second, &other); err != nil {
		t.Fatal(err)
	}
}

var defKey = partition.KeyOf("", "", "")

// TestLeaseGraceDropsAnEmptiedPartition (seam: the lease's removal is DELETE's): a worker that
// was its partition's last, removed after its lease's grace, takes the partition with it (a
// later write may give it another block size); a partition another worker still holds stays.
func TestLeaseGraceDropsAnEmptiedPartition(t *testing.T) {
	c := newClock()
	e := openTestEngine(t, vfs.NewMem(), c, 0)
	defer e.Close()
	ctx := context.Background()
	alone, shared := partition.KeyOf("alone", "", ""), partition.KeyOf("shared", "", "")
	ev := func(w uint64) []event.RouterEvent {
		return []event.RouterEvent{event.Stored(event.Rank{WorkerID: w}, 1, nil, event.Block{BlockHash: 100, TokensHash: 10})}
	}
	if _, err := e.IngestSized(ctx, alone, 32, ev(5)); err != nil {
		t.Fatal(err)
	}
	for _, w := range []uint64{6, 7} {
		if _, err := e.Ingest(ctx, shared, ev(w)); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []uint64{5, 6} {
		if _, err := e.SetLease(ctx, w, time.Second, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(time.Second + testGrace)
	if w, _, err := e.SweepLeases(ctx); err != nil || w != 2 {
		t.Fatalf("sweep: %d workers, %v", w, err)
	}
	if _, ok := e.Partitions().Lookup(alone); ok {
		t.Error("the emptied partition was not dropped")
	}
	if _, ok := e.Partitions().Lookup(shared); !ok {
		t.Error("a partition another worker holds was dropped")
	}
	if _, err := e.IngestSized(ctx, alone, 64, ev(8)); err != nil {
		t.Errorf("the dropped partition with another block size: %v", err)
	}
}
