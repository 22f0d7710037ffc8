package wal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/testutil"
	"go.uber.org/goleak"
)

// appender is one producer of the crash tests: it owns two ranks and commits batches that hold
// the same number of events for both plus both cursors, so atomicity is checkable after a
// crash: both ranks end at the same batch boundary, with cursors equal to their last ids.
type appender struct {
	ranks      [2]event.Rank
	mu         sync.Mutex
	attempted  []event.RouterEvent // per rank 0; rank 1 mirrors ids
	boundaries map[uint64]bool     // last id of every attempted batch (and 0)
	acked      uint64              // last id of the last acknowledged batch
}

func newAppender(g int) *appender {
	return &appender{
		ranks:      [2]event.Rank{{WorkerID: uint64(g + 1), DPRank: 0}, {WorkerID: uint64(g + 1), DPRank: 1}},
		boundaries: map[uint64]bool{0: true},
	}
}

// run commits batches until stop is closed or a commit fails; it returns the commit error.
func (a *appender) run(l *Log, rng *rand.Rand, stop <-chan struct{}) error {
	b := l.NewBatch()
	defer b.Close()
	next := uint64(1)
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		n := 1 + rng.IntN(8)
		a.mu.Lock()
		for range n {
			ev := realisticEvent(a.ranks[0], next)
			ev.Blocks = ev.Blocks[:rng.IntN(9)]
			a.attempted = append(a.attempted, ev)
			for _, r := range a.ranks {
				ev := ev.Clone()
				ev.WorkerID, ev.DPRank = r.WorkerID, r.DPRank
				b.Append(&ev)
			}
			next++
		}
		last := next - 1
		a.boundaries[last] = true
		a.mu.Unlock()
		for _, r := range a.ranks {
			b.SetCursor(r, Cursor{LastEventID: last})
		}
		if err := l.Commit(bg, b); err != nil {
			return err
		}
		a.mu.Lock()
		a.acked = last
		a.mu.Unlock()
	}
}

func (a *appender) ackedNow() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acked
}

// check verifies the reopened log against what a attempted: each rank holds exactly ids 1..k
// byte-identical to the attempted events, k is a batch boundary ≥ ackedBefore, both ranks and
// both cursors agree on k.
func (a *appender) check(t *testing.T, l *Log, ackedBefore uint64) uint64 {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	var ks [2]uint64
	for i, r := range a.ranks {
		var n uint64
		err := l.Range(r, 0, 0, func(ev *event.RouterEvent) error {
			n++
			if ev.EventID != n {
				return fmt.Errorf("rank %v: id %d at position %d", r, ev.EventID, n)
			}
			if n > uint64(len(a.attempted)) {
				return fmt.Errorf("rank %v: id %d was never attempted", r, n)
			}
			want := a.attempted[n-1].Clone()
			want.WorkerID, want.DPRank = r.WorkerID, r.DPRank
			if !reflect.DeepEqual(normalize(ev.Clone()), normalize(want)) {
				return fmt.Errorf("rank %v id %d:\n got %+v\nwant %+v", r, n, ev, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ks[i] = n
		m, err := l.RankMeta(r)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 && (!m.HasCursor || m.Cursor.LastEventID != n) {
			t.Fatalf("rank %v: log ends at %d, cursor %+v (batch not atomic)", r, n, m)
		}
	}
	if ks[0] != ks[1] {
		t.Fatalf("ranks %v end at %d and %d: a batch was split", a.ranks, ks[0], ks[1])
	}
	if !a.boundaries[ks[0]] {
		t.Fatalf("rank %v ends at %d, inside a batch", a.ranks[0], ks[0])
	}
	if ks[0] < ackedBefore {
		t.Fatalf("rank %v ends at %d but %d were acknowledged before the crash", a.ranks[0], ks[0], ackedBefore)
	}
	// The test is about format 4: a batch's events of a rank are one group record, so the
	// records recovered are the batches recovered.
	if recs := logRecords(t, l, a.ranks[0]); ks[0] > 0 && recs != a.batchesUpTo(ks[0]) {
		t.Fatalf("rank %v: %d log records for %d events in %d batches", a.ranks[0], recs, ks[0], a.batchesUpTo(ks[0]))
	}
	return ks[0]
}

// batchesUpTo counts the attempted batches whose ids are ≤ last (a boundary). Caller holds a.mu.
func (a *appender) batchesUpTo(last uint64) int {
	n := 0
	for b := range a.boundaries {
		if b > 0 && b <= last {
			n++
		}
	}
	return n
}

// logRecords counts r's log keys.
func logRecords(t *testing.T, l *Log, r event.Rank) int {
	t.Helper()
	lo, hi := store.RankLogBounds(r)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCrashKeepsAcknowledged: appenders commit with Sync while the filesystem "loses power"
// (CrashClone keeps the synced data plus a seeded random share of unsynced writes). Reopened,
// every acknowledged batch is there, in order, byte-identical, and nothing half-written.
func TestCrashKeepsAcknowledged(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // what earlier tests left is theirs
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for round, pct := range []int{0, 0, -1, -1, -1, 100} {
		if pct < 0 {
			pct = 1 + rng.IntN(99)
		}
		t.Run(fmt.Sprintf("round%d-unsynced%d%%", round, pct), func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			st, l := openLog(t, fs, Sync)
			const producers = 4
			apps := make([]*appender, producers)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range apps {
				apps[g] = newAppender(g)
				prng := rand.New(rand.NewPCG(seed, uint64(round*100+g)))
				wg.Go(func() {
					if err := apps[g].run(l, prng, stop); err != nil {
						t.Errorf("producer %d: %v", g, err)
					}
				})
			}
			// Crash once every producer has a seeded number of acknowledged batches (the test's
			// premise: a sleep alone may crash before anything was acknowledged on a busy machine).
			waitAcked(t, apps, uint64(1+rng.IntN(30)))
			var ackedBefore [producers]uint64
			for g, a := range apps {
				ackedBefore[g] = a.ackedNow()
			}
			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(seed, uint64(round)))})
			close(stop)
			wg.Wait()
			_ = l.Close()
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}

			var torn atomic.Int32
			st2, err := store.Open(testDir, store.Options{FS: crashed, Logger: quietLogger(), MemTableSize: 4 << 20,
				Listener: store.Listener{TornWALTail: func(store.TornTail) { torn.Add(1) }}})
			if err != nil {
				t.Fatalf("reopen after crash: %v", err)
			}
			defer st2.Close()
			l2, _ := Open(st2, Options{})
			total := uint64(0)
			for g, a := range apps {
				total += a.check(t, l2, ackedBefore[g])
			}
			t.Logf("recovered ids summed over producers: %d (acked before crash: %v), torn tails reported: %d",
				total, ackedBefore, torn.Load())
		})
	}
}

// TestWriteFailureFailsCommit: WAL writes or syncs start failing (errorfs) while appenders
// commit. The commit that hits it returns an error wrapping ErrFailed, every later commit fails
// too, and after a restart the log holds a prefix of what was attempted with every acknowledged
// batch in it.
func TestWriteFailureFailsCommit(t *testing.T) {
	defer goleak.VerifyNone(t, append(testutil.PebbleFatalLeftovers(), goleak.IgnoreCurrent())...) // Pebble may not close after a fatal error; what earlier tests left is theirs
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	for _, tc := range []struct {
		name  string
		kinds []errorfs.OpKind
	}{
		{"write", []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}},
		{"sync", []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			fs, on := testutil.FailingWAL(mem, tc.kinds...)
			st, l := openLog(t, fs, Sync)
			const producers = 3
			apps := make([]*appender, producers)
			errs := make([]error, producers)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range apps {
				apps[g] = newAppender(g)
				prng := rand.New(rand.NewPCG(seed, uint64(g)))
				wg.Go(func() { errs[g] = apps[g].run(l, prng, stop) })
			}
			waitAcked(t, apps, uint64(1+rng.IntN(15))) // something acknowledged before the failure
			on.Store(true)
			deadline := time.After(10 * time.Second)
			for l.Err() == nil {
				select {
				case <-deadline:
					t.Fatal("no commit failed within 10s of injecting errors")
				case <-time.After(time.Millisecond):
				}
			}
			close(stop)
			wg.Wait()
			for g, err := range errs {
				if err != nil && !errors.Is(err, ErrFailed) {
					t.Errorf("producer %d: %v, want ErrFailed", g, err)
				}
			}
			b := l.NewBatch()
			ev := realisticEvent(event.Rank{WorkerID: 99}, 1)
			b.Append(&ev)
			if err := l.Commit(bg, b); !errors.Is(err, ErrFailed) || !errors.Is(err, store.ErrFatal) {
				t.Fatalf("commit after the failure: %v, want ErrFailed wrapping store.ErrFatal", err)
			}
			b.Close()
			// The process "restarts": only what reached the disk counts.
			crashed := mem.CrashClone(vfs.CrashCloneCfg{})
			t.Logf("close after the failure: %v", st.Close())

			st2, err := openStore(t, crashed)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer st2.Close()
			l2, _ := Open(st2, Options{})
			var acked []uint64
			for _, a := range apps {
				acked = append(acked, a.ackedNow())
				a.check(t, l2, a.ackedNow())
			}
			t.Logf("failed with %v; acked per producer %v", l.Err(), acked)
		})
	}
}

// waitAcked returns once every appender has at least n acknowledged batches (fails after 30 s).
func waitAcked(t *testing.T, apps []*appender, n uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range apps {
		for a.ackedNow() < n {
			if time.Now().After(deadline) {
				t.Fatalf("appender acknowledged %d batches in 30 s, want %d before the fault", a.ackedNow(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
}
