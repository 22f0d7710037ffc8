package lanes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/testutil"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// TestCommitFailureAppliesNothing injects fatal WAL failures; Pebble may then not close.
	goleak.VerifyTestMain(m, testutil.PebbleFatalLeftovers()...)
}

type fixture struct {
	t   *testing.T
	fs  vfs.FS
	st  *store.Store
	log *wal.Log
	ix  *index.Index
	ts  *tier.Tiers // ix and the lower tiers
	p   *Pipeline
}

func open(t *testing.T, fs vfs.FS, opts Options) *fixture {
	t.Helper()
	return openWithProgress(t, fs, opts, nil)
}

// openWithProgress is open with a replay progress callback.
func openWithProgress(t *testing.T, fs vfs.FS, opts Options, progress func(done, total int, events uint64)) *fixture {
	t.Helper()
	st, err := store.Open("data", store.Options{FS: fs, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := wal.Open(st, wal.Options{Durability: wal.Sync, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ix := index.New(index.Options{})
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	ts := tier.New(ix)
	p := New(lg, Single(ts), opts)
	if err := p.Replay(context.Background(), progress); err != nil {
		t.Fatal(err)
	}
	p.Start()
	f := &fixture{t: t, fs: fs, st: st, log: lg, ix: ix, ts: ts, p: p}
	return f
}

func (f *fixture) close() {
	f.p.Close()
	if err := f.st.Close(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) submit(evs ...event.RouterEvent) Result {
	f.t.Helper()
	res, err := f.p.Submit(context.Background(), evs)
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

func blk(h uint64) event.Block { return event.Block{BlockHash: h, TokensHash: h + 1000} }

func ptr(x uint64) *uint64 { return &x }

func TestSiblingRanksLandOnDifferentLanes(t *testing.T) {
	f := open(t, vfs.NewMem(), Options{Lanes: 2})
	defer f.close()
	a, b := event.Rank{WorkerID: 5, DPRank: 0}, event.Rank{WorkerID: 5, DPRank: 1}
	f.submit(event.Stored(a, 1, nil, blk(1)), event.Stored(b, 1, nil, blk(2)))
	la, _ := f.p.LaneOf(a)
	lb, _ := f.p.LaneOf(b)
	if la == lb {
		t.Fatalf("sibling ranks share lane %d", la)
	}
	// Stickiness: a later batch keeps the assignment.
	f.submit(event.Stored(event.Rank{WorkerID: 9}, 1, nil, blk(3)), event.Stored(b, 2, ptr(2), blk(4)))
	if after, _ := f.p.LaneOf(b); after != lb {
		t.Fatal("rank moved lanes")
	}
}

func TestFlushIsABarrier(t *testing.T) {
	f := open(t, vfs.NewMem(), Options{Lanes: 2})
	defer f.close()
	r := event.Rank{WorkerID: 1}
	f.submit(event.Stored(r, 1, nil, blk(1)))
	release := make(chan struct{})
	entered := make(chan struct{})
	go func() {
		_ = f.p.Do(context.Background(), r, func() { close(entered); <-release })
	}()
	<-entered
	flushed := make(chan error, 1)
	go func() { flushed <- f.p.Flush(context.Background()) }()
	// The flush's barrier waits in the busy lane's queue: the flush cannot be over.
	lane, _ := f.p.LaneOf(r)
	waitFor(t, 5*time.Second, "the flush's barrier is queued behind the busy lane", func() bool { return f.p.QueueDepth()[lane] == 1 },
		func() string { return fmt.Sprintf("queue depths %v", f.p.QueueDepth()) })
	select {
	case err := <-flushed:
		t.Fatalf("flush returned while a lane was busy: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
}

func TestFullLanePushesBack(t *testing.T) {
	f := open(t, vfs.NewMem(), Options{Lanes: 1, QueueDepth: 1})
	defer f.close()
	r := event.Rank{WorkerID: 1}
	f.submit(event.Stored(r, 1, nil, blk(1)))
	release := make(chan struct{})
	entered := make(chan struct{})
	go func() { _ = f.p.Do(context.Background(), r, func() { close(entered); <-release }) }()
	<-entered
	// One request fits the queue; the next waits and gives up with ErrBusy.
	queued := make(chan error, 1)
	go func() {
		_, err := f.p.Submit(context.Background(), []event.RouterEvent{event.Stored(r, 2, ptr(1), blk(2))})
		queued <- err
	}()
	waitFor(t, 5*time.Second, "the first submit waits in the lane's queue", func() bool { return f.p.QueueDepth()[0] == 1 },
		func() string { return fmt.Sprintf("queue depths %v", f.p.QueueDepth()) })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := f.p.Submit(ctx, []event.RouterEvent{event.Stored(r, 3, ptr(2), blk(3))})
	if err == nil || !errorsIs(err, ErrBusy) {
		t.Fatalf("want ErrBusy, got %v", err)
	}
	close(release)
	select {
	case err := <-queued:
		if err != nil {
			t.Fatalf("the queued submit, once the lane is free: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued submit did not return within 5 s of the lane being freed")
	}
	if err := f.p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestCursorRules(t *testing.T) {
	r := event.Rank{WorkerID: 3, DPRank: 1}
	type want struct {
		res      Result
		last     uint64
		degraded bool
		lost     uint64
		score    uint32 // score of the query [1001, 1002, 1003, 1004]
	}
	cases := []struct {
		name string
		seed []event.RouterEvent
		in   []event.RouterEvent
		want want
	}{
		{"contiguous", []event.RouterEvent{event.Stored(r, 1, nil, blk(1))},
			[]event.RouterEvent{event.Stored(r, 2, ptr(1), blk(2))}, want{Result{1, 0}, 2, false, 0, 2}},
		{"stale and duplicate ignored", []event.RouterEvent{event.Stored(r, 1, nil, blk(1)), event.Stored(r, 2, ptr(1), blk(2))},
			[]event.RouterEvent{event.Removed(r, 2, 2), event.Stored(r, 2, ptr(1), blk(2))}, want{Result{0, 2}, 2, false, 0, 2}},
		{"gap resets and degrades", []event.RouterEvent{event.Stored(r, 1, nil, blk(1)), event.Stored(r, 2, ptr(1), blk(2))},
			[]event.RouterEvent{event.Stored(r, 7, nil, blk(1))}, want{Result{1, 0}, 7, true, 1, 1}},
		{"cleared is a barrier across a gap", []event.RouterEvent{event.Stored(r, 1, nil, blk(1))},
			[]event.RouterEvent{event.Cleared(r, 9), event.Stored(r, 10, nil, blk(1))}, want{Result{2, 0}, 10, false, 0, 1}},
		{"stale cleared ignored", []event.RouterEvent{event.Stored(r, 1, nil, blk(1)), event.Stored(r, 2, ptr(1), blk(2))},
			[]event.RouterEvent{event.Cleared(r, 2)}, want{Result{0, 1}, 2, false, 0, 2}},
		{"publisher restart starts an epoch", []event.RouterEvent{event.Stored(r, 1, nil, blk(1)), event.Stored(r, 2, ptr(1), blk(2)), event.Stored(r, 3, ptr(2), blk(3))},
			[]event.RouterEvent{event.Stored(r, 0, nil, blk(1))}, want{Result{1, 0}, 0, false, 0, 1}},
		{"degraded clears on cleared", []event.RouterEvent{event.Stored(r, 1, nil, blk(1)), event.Stored(r, 5, nil, blk(1))},
			[]event.RouterEvent{event.Cleared(r, 6)}, want{Result{1, 0}, 6, false, 1, 0}},
		{"other tiers are logged, not applied", []event.RouterEvent{event.Stored(r, 1, nil, blk(1))},
			[]event.RouterEvent{{WorkerID: 3, DPRank: 1, EventID: 2, Tier: event.TierDisk, Kind: event.KindStored, HasParent: true, ParentHash: 1, Blocks: []event.Block{blk(2)}}},
			want{Result{1, 0}, 2, false, 0, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := vfs.NewMem()
			check := func(f *fixture, res Result, checkRes bool) {
				t.Helper()
				if checkRes && res != c.want.res {
					t.Fatalf("result %+v, want %+v", res, c.want.res)
				}
				st, ok := f.p.RankStatus(r)
				if !ok || st.Last != c.want.last || st.Degraded != c.want.degraded || st.Lost != c.want.lost {
					t.Fatalf("status %+v (known %v), want last %d degraded %v lost %d", st, ok, c.want.last, c.want.degraded, c.want.lost)
				}
				var got uint32
				for _, s := range f.ix.FindMatches([]uint64{1001, 1002, 1003, 1004}, false) {
					if s.Rank() == r {
						got = s.Score
					}
				}
				if got != c.want.score {
					t.Fatalf("score %d, want %d", got, c.want.score)
				}
			}
			f := open(t, fs, Options{Lanes: 2})
			f.submit(c.seed...)
			res := f.submit(c.in...)
			check(f, res, true)
			f.close()
			// The same state comes back from the log after a restart.
			f2 := open(t, fs, Options{Lanes: 2})
			defer f2.close()
			check(f2, Result{}, false)
		})
	}
}

func TestRemoveRankAndWorkerDurable(t *testing.T) {
	fs := vfs.NewMem()
	f := open(t, fs, Options{Lanes: 2})
	w1a, w1b, w2 := event.Rank{WorkerID: 1}, event.Rank{WorkerID: 1, DPRank: 1}, event.Rank{WorkerID: 2}
	f.submit(event.Stored(w1a, 1, nil, blk(1)), event.Stored(w1b, 1, nil, blk(1)), event.Stored(w2, 1, nil, blk(1)))
	n, err := f.p.RemoveWorker(context.Background(), 1)
	if err != nil || n != 2 {
		t.Fatalf("remove worker: %d %v", n, err)
	}
	ok, err := f.p.RemoveRank(context.Background(), event.Rank{WorkerID: 7})
	if err != nil || ok {
		t.Fatalf("remove unknown rank: %v %v", ok, err)
	}
	f.close()
	f2 := open(t, fs, Options{Lanes: 2})
	defer f2.close()
	sc := f2.ix.FindMatches([]uint64{1001}, false)
	if len(sc) != 1 || sc[0].Rank() != w2 {
		t.Fatalf("after restart: %+v", sc)
	}
	if st := f2.p.Status(); len(st) != 1 || st[0].Rank != w2 {
		t.Fatalf("status after restart: %+v", st)
	}
	// A removed rank may come back with new events, from a clean slate.
	f2.submit(event.Stored(w1a, 40, nil, blk(5)))
	if st, ok := f2.p.RankStatus(w1a); !ok || st.Last != 40 || st.Degraded {
		t.Fatalf("re-added rank: %+v", st)
	}
}

// chain produces a valid random stream for a rank: chains from the root or a held block,
// removals of held blocks, rare clears; contiguous ids from 1.
type chain struct {
	rk   event.Rank
	id   uint64
	next uint64
	held []uint64
	rng  *rand.Rand
}

func (c *chain) events(n int) []event.RouterEvent {
	out := make([]event.RouterEvent, 0, n)
	for range n {
		c.id++
		switch x := c.rng.IntN(20); {
		case x == 0:
			c.held = c.held[:0]
			out = append(out, event.Cleared(c.rk, c.id))
		case x < 6 && len(c.held) > 0:
			i := c.rng.IntN(len(c.held))
			h := c.held[i]
			c.held = append(c.held[:i], c.held[i+1:]...)
			out = append(out, event.Removed(c.rk, c.id, h, 999_999_999))
		default:
			var parent *uint64
			if len(c.held) > 0 && c.rng.IntN(4) > 0 {
				parent = ptr(c.held[c.rng.IntN(len(c.held))])
			}
			k := 1 + c.rng.IntN(4)
			blocks := make([]event.Block, k)
			for j := range blocks {
				c.next++
				blocks[j] = event.Block{BlockHash: c.next, TokensHash: c.next % 7}
				c.held = append(c.held, c.next)
			}
			out = append(out, event.Stored(c.rk, c.id, parent, blocks...))
		}
	}
	return out
}

func scoresOf(ix *index.Index, queries [][]uint64) [][]index.Score {
	out := make([][]index.Score, len(queries))
	for i, q := range queries {
		out[i] = ix.FindMatches(q, false)
	}
	return out
}

func queriesFrom(evs []event.RouterEvent, rng *rand.Rand, n int) [][]uint64 {
	var qs [][]uint64
	for len(qs) < n {
		ev := evs[rng.IntN(len(evs))]
		if ev.Kind != event.KindStored || len(ev.Blocks) == 0 {
			continue
		}
		q := make([]uint64, 0, 8)
		for i := 0; i < 1+rng.IntN(6); i++ {
			q = append(q, uint64(rng.IntN(7)))
		}
		qs = append(qs, q)
	}
	return qs
}

// TestCrashKeepsAcknowledged ingests through the pipeline on a crashable in-memory FS, takes a
// crash clone (synced data only, or a seeded share of unsynced data), reopens, and checks the
// rebuilt index equals a reference model of the acknowledged events.
func TestCrashKeepsAcknowledged(t *testing.T) {
	for _, pct := range []int{0, 30, 100} {
		t.Run(fmt.Sprintf("unsynced=%d%%", pct), func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 2))
			fs := vfs.NewCrashableMem()
			f := open(t, fs, Options{Lanes: 2, RetainEvents: 40})
			model := testutil.NewModel()
			var all []event.RouterEvent
			chains := make([]*chain, 6)
			for i := range chains {
				chains[i] = &chain{rk: event.Rank{WorkerID: uint64(i / 2), DPRank: uint32(i % 2)}, next: uint64(i) * 1_000_000, rng: rng}
			}
			for round := 0; round < 40; round++ {
				var batch []event.RouterEvent
				for _, c := range chains {
					batch = append(batch, c.events(1+rng.IntN(4))...)
				}
				f.submit(batch...) // acknowledged: durable
				for i := range batch {
					model.Apply(&batch[i])
				}
				all = append(all, batch...)
			}
			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(seed, 3))})
			queries := queriesFrom(all, rng, 200)
			before := scoresOf(f.ix, queries)
			f.close()
			f2 := open(t, crashed, Options{Lanes: 3})
			defer f2.close()
			after := scoresOf(f2.ix, queries)
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("scores differ after crash")
			}
			for _, c := range chains {
				if got, want := f2.ix.RankBlocks(c.rk), uint64(model.Held(c.rk)); got != want {
					t.Fatalf("rank %v holds %d blocks after crash, model %d", c.rk, got, want)
				}
				st, ok := f2.p.RankStatus(c.rk)
				if !ok || st.Last != c.id {
					t.Fatalf("rank %v cursor %+v, want %d", c.rk, st, c.id)
				}
				for _, q := range queries {
					score := uint32(0)
					for _, s := range f2.ix.FindMatches(q, false) {
						if s.Rank() == c.rk {
							score = s.Score
						}
					}
					if hp := model.HeldPrefix(c.rk, q); int(score) > hp || int(score) < model.ReachablePrefix(c.rk, q) {
						t.Fatalf("rank %v query %v: score %d outside [%d, %d]", c.rk, q, score, model.ReachablePrefix(c.rk, q), hp)
					}
				}
			}
		})
	}
}

func TestRetentionFoldsOldEvents(t *testing.T) {
	fs := vfs.NewMem()
	f := open(t, fs, Options{Lanes: 1, RetainEvents: 10})
	rng := rand.New(rand.NewPCG(7, 7))
	c := &chain{rk: event.Rank{WorkerID: 4}, rng: rng}
	var all []event.RouterEvent
	for range 30 {
		evs := c.events(3)
		f.submit(evs...)
		all = append(all, evs...)
	}
	first, err := f.log.First(c.rk)
	if err != nil {
		t.Fatal(err)
	}
	last, _ := f.log.Last(c.rk)
	// Folding is postponed while the rank holds blocks stranded below a removed mid-chain block
	// (ErrNotFoldable), so the retained log may exceed 2×10; it must have been folded at least
	// once and keep at least the newest 10 events.
	if first <= 1 || last != c.id || last-first+1 < 10 {
		t.Fatalf("retained log [%d, %d] of %d events with retain 10", first, last, c.id)
	}
	snap, ok, err := f.log.ReadSnapshot(c.rk)
	if err != nil || !ok || snap.LastEventID != first-1 {
		t.Fatalf("snapshot %v %v at %d, want at %d", ok, err, snap.LastEventID, first-1)
	}
	queries := queriesFrom(all, rng, 100)
	before := scoresOf(f.ix, queries)
	f.close()
	f2 := open(t, fs, Options{Lanes: 1, RetainEvents: 10})
	defer f2.close()
	if after := scoresOf(f2.ix, queries); !reflect.DeepEqual(before, after) {
		t.Fatal("scores differ after restart from snapshot + log")
	}
}

func TestFoldRefusesStrandedBlocks(t *testing.T) {
	f := open(t, vfs.NewMem(), Options{Lanes: 1})
	defer f.close()
	r := event.Rank{WorkerID: 1}
	f.submit(event.Stored(r, 1, nil, blk(1), blk(2), blk(3)), event.Removed(r, 2, 2))
	err := f.p.Do(context.Background(), r, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if err := recovery.Fold(context.Background(), f.log, r, 2); !errorsIs(err, recovery.ErrNotFoldable) {
		t.Fatalf("want ErrNotFoldable, got %v", err)
	}
	f.submit(event.Stored(r, 3, ptr(1), blk(2)))
	if err := recovery.Fold(context.Background(), f.log, r, 3); err != nil {
		t.Fatalf("after the re-store the rank folds: %v", err)
	}
	if first, _ := f.log.First(r); first != 0 {
		t.Fatalf("log after folding everything: first %d", first)
	}
}

func TestReplayIsCancellable(t *testing.T) {
	fs := vfs.NewMem()
	f := open(t, fs, Options{Lanes: 2})
	for w := range 20 {
		f.submit(event.Stored(event.Rank{WorkerID: uint64(w)}, 1, nil, blk(1)))
	}
	f.close()
	st, err := store.Open("data", store.Options{FS: fs, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lg, err := wal.Open(st, wal.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := New(lg, Single(tier.New(index.New(index.Options{}))), Options{Lanes: 2, Logger: quiet()})
	defer p.Close()
	if err := p.Replay(ctx, nil); !errorsIs(err, context.Canceled) {
		t.Fatalf("replay with a cancelled context: %v", err)
	}
}
