package engine

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// openSourceEngine is openTestEngine with source-implied leases of ttl (0: none).
func openSourceEngine(t *testing.T, fs vfs.FS, c *clock, ttl time.Duration) *Engine {
	t.Helper()
	e, err := Open(Config{DataDir: "data", FS: fs, Lanes: 2, Now: c.Now, LeaseGrace: testGrace, LeaseSweep: time.Hour,
		SourceLease: ttl, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Recover(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// A partition other than the default, so placement and the stale filter are checked there.
var srcKey = partition.KeyOf("llama", "blue", "")

// feedFrom places one Stored event for rk (local hash 10) as an event source does — Place,
// then the source door — with event id id.
func feedFrom(t *testing.T, e *Engine, src Source, rk event.Rank, id uint64) {
	t.Helper()
	ctx := context.Background()
	p, err := e.Place(ctx, Placement{Door: src, Key: srcKey, Worker: rk.WorkerID})
	if err != nil {
		t.Fatal(err)
	}
	rk.Partition = p
	if _, err := e.SourceDoor().SubmitWithMeta(ctx, []event.RouterEvent{
		event.Stored(rk, id, nil, event.Block{BlockHash: 100 + id, TokensHash: 10})}); err != nil {
		t.Fatal(err)
	}
}

// srcAnswered lists the workers answering local hash 10 in srcKey.
func srcAnswered(e *Engine) []uint64 {
	var out []uint64
	for _, s := range e.Find(nil, srcKey, Query{Hashes: []uint64{10}}) {
		out = append(out, s.WorkerID)
	}
	return out
}

func wantWorkers(t *testing.T, what string, got []uint64, want ...uint64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: workers %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: workers %v, want %v", what, got, want)
		}
	}
}

// TestSourceLeaseIsRenewedByEvents: with SourceLease set, a source-fed worker holds an implied
// lease its events renew; silent past the ttl it is stale (left out, state kept), its next event
// restores it, and past the grace the sweep removes it. A worker fed through Ingest (HTTP, the
// library) never gets one, and a worker's explicit lease is not renewed by its events.
func TestSourceLeaseIsRenewedByEvents(t *testing.T) {
	c := newClock()
	e := openSourceEngine(t, vfs.NewMem(), c, 10*time.Second)
	defer e.Close()
	ctx := context.Background()
	zmqW, httpW, ownW := event.Rank{WorkerID: 5}, event.Rank{WorkerID: 6}, event.Rank{WorkerID: 7}
	feedFrom(t, e, SourceZMQ, zmqW, 1)
	if _, err := e.IngestBatches(ctx, []Batch{{Key: srcKey, Source: SourceHTTP, Events: []event.RouterEvent{
		event.Stored(httpW, 1, nil, event.Block{BlockHash: 1, TokensHash: 10})}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SetLease(ctx, ownW.WorkerID, 5*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	feedFrom(t, e, SourceNATS, ownW, 1)

	l, st := e.leaseState(5)
	if st != LeaseLive || !l.Implied || l.TTL != 10*time.Second || !l.Deadline.Equal(c.Now().Add(10*time.Second)) {
		t.Fatalf("implied lease %+v %v", l, st)
	}
	if _, st := e.leaseState(6); st != LeaseNone {
		t.Fatalf("an HTTP-fed worker got a lease: %v", st)
	}
	if l, _ := e.leaseState(7); l.Implied || l.TTL != 5*time.Second {
		t.Fatalf("the explicit lease was taken over by the source: %+v", l)
	}
	wantWorkers(t, "all live", srcAnswered(e), 5, 6, 7)

	c.Advance(6 * time.Second)
	feedFrom(t, e, SourceZMQ, zmqW, 2) // renews 5 to now+10s
	feedFrom(t, e, SourceNATS, ownW, 2)
	wantWorkers(t, "the explicit lease expired though events flow", srcAnswered(e), 5, 6)

	c.Advance(9 * time.Second) // 5's renewed deadline is 1s ahead
	wantWorkers(t, "renewed by its event", srcAnswered(e), 5, 6)
	c.Advance(time.Second)
	wantWorkers(t, "silent for the ttl", srcAnswered(e), 6)
	if st, ok := e.RankStatus(event.Rank{Partition: mustPart(t, e), WorkerID: 5}); !ok || st.Last != 2 {
		t.Fatalf("the stale rank lost its state: %+v %v", st, ok)
	}
	feedFrom(t, e, SourceZMQ, zmqW, 3)
	wantWorkers(t, "its next event restores it", srcAnswered(e), 5, 6)

	c.Advance(10*time.Second + testGrace)
	if w, _, err := e.SweepLeases(ctx); err != nil || w != 2 { // 5 (implied) and 7 (explicit)
		t.Fatalf("sweep: %d workers, %v", w, err)
	}
	wantWorkers(t, "after the grace", srcAnswered(e), 6)
	if len(e.leases()) != 0 {
		t.Fatalf("leases left: %+v", e.leases())
	}
}

func mustPart(t *testing.T, e *Engine) uint32 {
	t.Helper()
	p, ok := e.Partitions().Lookup(srcKey)
	if !ok {
		t.Fatal("no partition", srcKey)
	}
	return p.ID
}

// TestSourceLeaseSurvivesARestart: the implied deadline is written with the events, so a
// restart keeps it and the time spent down counts: down past it, the worker is stale at once;
// past the grace too, the first sweep removes it. Without SourceLease the door takes no lease.
func TestSourceLeaseSurvivesARestart(t *testing.T) {
	fs := vfs.NewMem()
	c := newClock()
	e := openSourceEngine(t, fs, c, 10*time.Second)
	feedFrom(t, e, SourceDynamo, event.Rank{WorkerID: 5}, 1)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	c.Advance(3 * time.Second)
	e = openSourceEngine(t, fs, c, 0) // implied leases off now: the stored one still holds
	if l, st := e.leaseState(5); st != LeaseLive || !l.Implied {
		t.Fatalf("after a short restart: %+v %v", l, st)
	}
	feedFrom(t, e, SourceDynamo, event.Rank{WorkerID: 9}, 1)
	if _, st := e.leaseState(9); st != LeaseNone {
		t.Fatal("a source door without SourceLease took a lease")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	c.Advance(8 * time.Second)
	e = openSourceEngine(t, fs, c, 10*time.Second)
	wantWorkers(t, "down past the deadline", srcAnswered(e), 9)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	c.Advance(testGrace)
	e = openSourceEngine(t, fs, c, 10*time.Second)
	defer e.Close()
	// The engine's own sweeper sweeps once as it starts, so either it or this sweep removes the
	// worker whose lease ran out while the engine was down; a second sweep finds nothing.
	if _, _, err := e.SweepLeases(context.Background()); err != nil {
		t.Fatalf("first sweep after the grace: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(e.RanksOfWorker(5)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("ranks of 5 left after the grace: %v", e.RanksOfWorker(5))
		}
		time.Sleep(time.Millisecond)
	}
	if _, st := e.leaseState(5); st != LeaseNone {
		t.Fatalf("lease of 5 after its removal: %v", st)
	}
	if rs := e.RanksOfWorker(9); len(rs) == 0 {
		t.Fatal("worker 9 (no lease) was removed")
	}
}

// TestAccuracyPerSourceKind: outcomes count per partition and, within it, per source kind of
// the rank's worker (the door that last fed it); a worker that only routing decisions named is
// "decisions" until an event door feeds it.
func TestAccuracyPerSourceKind(t *testing.T) {
	c := newClock()
	fs := vfs.NewMem()
	e := openSourceEngine(t, fs, c, 0)
	defer func() { _ = e.Close() }()
	ctx := context.Background()
	feedFrom(t, e, SourceZMQ, event.Rank{WorkerID: 5}, 1)
	if _, err := e.IngestBatches(ctx, []Batch{{Key: srcKey, Source: SourceHTTP, Events: []event.RouterEvent{
		event.Stored(event.Rank{WorkerID: 6}, 1, nil, event.Block{BlockHash: 1, TokensHash: 10})}}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.RecordDecision(ctx, srcKey, event.Rank{WorkerID: 8}, []uint64{10}, nil); err != nil {
		t.Fatal(err)
	}
	if e.doorOf(8) != SourceDecisions || e.doorOf(42) != SourceUnknown {
		t.Fatalf("kinds %v %v", e.doorOf(8), e.doorOf(42))
	}
	if _, _, err := e.RecordDecision(ctx, srcKey, event.Rank{WorkerID: 5}, []uint64{10}, nil); err != nil {
		t.Fatal(err)
	}
	if e.doorOf(5) != SourceZMQ {
		t.Fatalf("a decision renamed an event-fed worker: %v", e.doorOf(5))
	}
	out := func(w uint64, cached uint64) Outcome {
		return Outcome{Key: srcKey, Rank: event.Rank{WorkerID: w}, Hashes: []uint64{10, 20}, CachedTokens: cached}
	}
	// 5 (zmq): exact, then over; 6 (http): exact; 8 (decisions): under.
	if _, err := e.RecordOutcomes([]Outcome{out(5, 16), out(5, 0), out(6, 16), out(8, 32)}); err != nil {
		t.Fatal(err)
	}
	as := e.Accuracies()
	if len(as) != 1 || as[0].Key != srcKey || as[0].Outcomes != 4 || as[0].Over != 1 || as[0].Under != 1 {
		t.Fatalf("accuracies %+v", as)
	}
	type row struct {
		src                      Source
		outcomes, exact, over, u uint64
	}
	var got []row
	for _, s := range as[0].BySource {
		got = append(got, row{s.Source, s.Outcomes, s.Exact, s.Over, s.Under})
	}
	want := []row{{SourceDecisions, 1, 0, 0, 1}, {SourceHTTP, 1, 1, 0, 0}, {SourceZMQ, 2, 1, 1, 0}}
	if len(got) != len(want) {
		t.Fatalf("by source %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("by source %+v, want %+v", got, want)
		}
	}
	// The per-source histograms add up to the partition's.
	for b := range as[0].Histogram {
		sum := uint64(0)
		for _, s := range as[0].BySource {
			sum += s.Histogram[b]
		}
		if sum != as[0].Histogram[b] {
			t.Fatalf("bucket %d: %d by source, %d in all", b, sum, as[0].Histogram[b])
		}
	}
	// A removed worker's kind is forgotten, durably; the others' survive a restart.
	if _, err := e.Remove(ctx, 6, nil); err != nil {
		t.Fatal(err)
	}
	if e.doorOf(6) != SourceUnknown {
		t.Fatalf("removed worker still %v", e.doorOf(6))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openSourceEngine(t, fs, c, 0)
	for w, want := range map[uint64]Source{5: SourceZMQ, 6: SourceUnknown, 8: SourceDecisions} {
		if got := e.doorOf(w); got != want {
			t.Errorf("after a restart worker %d is %v, want %v", w, got, want)
		}
	}
}

// TestSourceLeaseSurvivesKill9: the implied lease is durable with the events that renewed it:
// a crash right after the source's submit returned keeps both.
func TestSourceLeaseSurvivesKill9(t *testing.T) {
	fs := vfs.NewCrashableMem()
	c := newClock()
	e := openSourceEngine(t, fs, c, 10*time.Second)
	feedFrom(t, e, SourceZMQ, event.Rank{WorkerID: 5}, 1)
	c.Advance(4 * time.Second)
	feedFrom(t, e, SourceZMQ, event.Rank{WorkerID: 5}, 2)
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	_ = e.Close()
	e = openSourceEngine(t, crashed, c, 10*time.Second)
	defer e.Close()
	l, st := e.leaseState(5)
	if st != LeaseLive || !l.Implied || !l.Deadline.Equal(c.Now().Add(10*time.Second)) {
		t.Fatalf("after kill -9: %+v %v, want the deadline of the second batch", l, st)
	}
	if rs, ok := e.RankStatus(event.Rank{Partition: mustPart(t, e), WorkerID: 5}); !ok || rs.Last != 2 {
		t.Fatalf("after kill -9: rank %+v %v", rs, ok)
	}
}

// TestSourceLeaseRenewalIsThrottled: a busy source's batches renew its worker's implied lease at
// most once per quarter of the ttl (no lease entry in every batch's log write): within a quarter
// the deadline stays, past it the next batch moves it to now + ttl; after a restart the durable
// deadline is the one in force.
func TestSourceLeaseRenewalIsThrottled(t *testing.T) {
	c := newClock()
	fs := vfs.NewMem()
	ttl := 8 * time.Second
	e := openSourceEngine(t, fs, c, ttl)
	rk := event.Rank{WorkerID: 5}
	deadline := func(e *Engine) time.Time {
		for _, l := range e.leases() {
			if l.WorkerID == rk.WorkerID {
				return l.Deadline
			}
		}
		t.Fatal("no lease")
		return time.Time{}
	}
	feedFrom(t, e, SourceZMQ, rk, 1)
	first := deadline(e)
	if want := c.Now().Add(ttl); !first.Equal(want) {
		t.Fatalf("first deadline %v, want %v", first, want)
	}
	c.Advance(ttl / 8)
	feedFrom(t, e, SourceZMQ, rk, 2)
	if got := deadline(e); !got.Equal(first) {
		t.Fatalf("renewed within a quarter of the ttl: deadline %v, want %v kept", got, first)
	}
	c.Advance(ttl / 4)
	feedFrom(t, e, SourceZMQ, rk, 3)
	renewed := deadline(e)
	if want := c.Now().Add(ttl); !renewed.Equal(want) {
		t.Fatalf("past a quarter of the ttl: deadline %v, want %v", renewed, want)
	}
	e.Close()
	e = openSourceEngine(t, fs, c, ttl)
	defer e.Close()
	if got := deadline(e); !got.Equal(renewed) {
		t.Fatalf("after a restart: deadline %v, want %v", got, renewed)
	}
}
