package lanes

import (
	"bytes"
	"context"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
)

// checkpoints records the Listener.Checkpoint calls of a pipeline.
type checkpoints struct {
	mu   sync.Mutex
	ok   map[event.Rank]uint64 // the newest written checkpoint id per rank
	errs []error
}

func (c *checkpoints) listener() Listener {
	return Listener{Checkpoint: func(r event.Rank, lastID uint64, _ int, _ time.Duration, err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			c.errs = append(c.errs, err)
			return
		}
		if c.ok == nil {
			c.ok = map[event.Rank]uint64{}
		}
		c.ok[r] = lastID
	}}
}

func (c *checkpoints) of(r event.Rank) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.ok[r]
	return id, ok
}

// checkpointOptions checkpoint early: the test chains hold a few dozen blocks.
func checkpointOptions(c *checkpoints) Options {
	return Options{Lanes: 2, CheckpointRatio: 0.5, CheckpointMinBlocks: 8, Listener: c.listener()}
}

// logged returns every log event of r (the range route's source), cloned.
func logged(t *testing.T, l *wal.Log, r event.Rank) []event.RouterEvent {
	t.Helper()
	var out []event.RouterEvent
	if err := l.Range(r, 0, 0, func(ev *event.RouterEvent) error {
		out = append(out, ev.Clone())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCheckpointRestartsSameTreeAndRanges checks the rule of online checkpoints (issue 17): a
// checkpointed rank's snapshot is rewritten without cutting its log, so its range answers (the
// retained log) are unchanged, and a restart rebuilds the same tree and cursor while replaying
// fewer events than the log holds.
func TestCheckpointRestartsSameTreeAndRanges(t *testing.T) {
	fs := vfs.NewMem()
	var cps checkpoints
	f := open(t, fs, checkpointOptions(&cps))
	rng := rand.New(rand.NewPCG(17, 2))
	chains := make([]*chain, 4)
	for i := range chains {
		chains[i] = &chain{rk: event.Rank{WorkerID: uint64(i)}, next: uint64(i) * 1_000_000, rng: rng}
	}
	var all []event.RouterEvent
	for range 150 {
		for _, c := range chains {
			evs := c.events(1 + rng.IntN(3))
			f.submit(evs...)
			all = append(all, evs...)
		}
	}
	if err := f.p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	total := 0
	ranges := map[event.Rank][]event.RouterEvent{}
	for _, c := range chains {
		id, ok := cps.of(c.rk)
		if !ok {
			t.Fatalf("rank %v was never checkpointed", c.rk)
		}
		snap, has, err := f.log.ReadSnapshot(c.rk)
		if err != nil || !has || snap.LastEventID != id {
			t.Fatalf("rank %v snapshot %v at %d (%v), want the checkpoint at %d", c.rk, has, snap.LastEventID, err, id)
		}
		ranges[c.rk] = logged(t, f.log, c.rk)
		if got := uint64(len(ranges[c.rk])); got != c.id {
			t.Fatalf("rank %v retains %d log events of %d: a checkpoint must not cut the log", c.rk, got, c.id)
		}
		total += len(ranges[c.rk])
	}
	queries := queriesFrom(all, rng, 200)
	before := scoresOf(f.ix, queries)
	f.close()

	var replayed atomic.Uint64 // the callback runs on every replaying lane
	f2 := openWithProgress(t, fs, Options{Lanes: 3}, func(done, total int, events uint64) {
		if done == total {
			replayed.Store(events)
		}
	})
	defer f2.close()
	if after := scoresOf(f2.ix, queries); !reflect.DeepEqual(before, after) {
		t.Fatal("scores differ after a restart from checkpoints")
	}
	for _, c := range chains {
		if st, ok := f2.p.RankStatus(c.rk); !ok || st.Last != c.id {
			t.Fatalf("rank %v after restart: %+v, want last %d", c.rk, st, c.id)
		}
		if got := logged(t, f2.log, c.rk); !reflect.DeepEqual(got, ranges[c.rk]) {
			t.Fatalf("rank %v: the retained log changed across the restart", c.rk)
		}
	}
	if n := replayed.Load(); n == 0 || n >= uint64(total) {
		t.Fatalf("replayed %d events, the logs hold %d: the checkpoints saved nothing", n, total)
	}
}

// TestCrashLosingACheckpointIsHarmless checks that a checkpoint is derived data (it is written
// without fsync): a crash that loses it restarts from the older snapshot and the log with the
// same tree and cursor.
func TestCrashLosingACheckpointIsHarmless(t *testing.T) {
	fs := vfs.NewCrashableMem()
	var cps checkpoints
	f := open(t, fs, Options{Lanes: 1, CheckpointRatio: 0.5, CheckpointMinBlocks: 8, Listener: cps.listener()})
	rng := rand.New(rand.NewPCG(5, 5))
	c := &chain{rk: event.Rank{WorkerID: 3}, rng: rng}
	var all []event.RouterEvent
	first := uint64(0)
	// Submit one event at a time until a checkpoint follows the last acknowledged (synced)
	// commit: nothing syncs after it, so the crash below loses it.
	for i := 0; i < 5000; i++ {
		evs := c.events(1)
		f.submit(evs...)
		all = append(all, evs...)
		if err := f.p.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		id, ok := cps.of(c.rk)
		if ok && first == 0 {
			first = id
		}
		if ok && id > first && id == c.id {
			break
		}
	}
	last, ok := cps.of(c.rk)
	if !ok || last != c.id || last == first {
		t.Fatalf("no second checkpoint at the newest event (first %d, last %d %v, id %d)", first, last, ok, c.id)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	queries := queriesFrom(all, rng, 200)
	before := scoresOf(f.ix, queries)
	f.close()

	f2 := open(t, crashed, Options{Lanes: 1})
	defer f2.close()
	snap, has, err := f2.log.ReadSnapshot(c.rk)
	if err != nil {
		t.Fatal(err)
	}
	if has && snap.LastEventID >= last {
		t.Fatalf("the unsynced checkpoint at %d survived the crash (snapshot at %d): the test proves nothing", last, snap.LastEventID)
	}
	if after := scoresOf(f2.ix, queries); !reflect.DeepEqual(before, after) {
		t.Fatal("scores differ after a crash lost the checkpoint")
	}
	if st, ok := f2.p.RankStatus(c.rk); !ok || st.Last != c.id || st.Degraded {
		t.Fatalf("rank after crash: %+v, want last %d, not degraded", st, c.id)
	}
}

// TestCheckpointThenRetentionTrimsOnly checks that retention never moves a snapshot backwards:
// with a checkpoint newer than the cut, Fold only deletes the log prefix (wal.Log.TrimLog), the
// log keeps at least RetainEvents events, and a restart rebuilds the same tree.
func TestCheckpointThenRetentionTrimsOnly(t *testing.T) {
	fs := vfs.NewMem()
	var cps checkpoints
	opts := Options{Lanes: 1, RetainEvents: 40, CheckpointRatio: 0.5, CheckpointMinBlocks: 8, Listener: cps.listener()}
	f := open(t, fs, opts)
	rng := rand.New(rand.NewPCG(9, 9))
	c := &chain{rk: event.Rank{WorkerID: 8}, rng: rng}
	var all []event.RouterEvent
	for range 200 {
		evs := c.events(1)
		f.submit(evs...)
		all = append(all, evs...)
	}
	if err := f.p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	meta, err := f.log.RankMeta(c.rk)
	if err != nil {
		t.Fatal(err)
	}
	firstID, _ := f.log.First(c.rk)
	if meta.Cut == 0 || firstID != meta.Cut || c.id-firstID+1 < 40 {
		t.Fatalf("cut %d, first %d, last %d: want a retention cut that keeps ≥ 40 events", meta.Cut, firstID, c.id)
	}
	if meta.SnapshotID+1 < meta.Cut {
		t.Fatalf("snapshot at %d below the cut %d: events lost", meta.SnapshotID, meta.Cut)
	}
	queries := queriesFrom(all, rng, 200)
	before := scoresOf(f.ix, queries)
	f.close()
	f2 := open(t, fs, opts)
	defer f2.close()
	if after := scoresOf(f2.ix, queries); !reflect.DeepEqual(before, after) {
		t.Fatal("scores differ after a restart from a checkpoint and a trimmed log")
	}
}

// TestCheckpointThenEpochAndRemoval checks the interleavings that replace a rank's state after a
// checkpoint: a publisher restart (new epoch: the log and snapshot are reset) restarts with the
// new epoch's state only, and a removed rank stays removed.
func TestCheckpointThenEpochAndRemoval(t *testing.T) {
	fs := vfs.NewMem()
	var cps checkpoints
	opts := checkpointOptions(&cps)
	f := open(t, fs, opts)
	a, b := event.Rank{WorkerID: 1}, event.Rank{WorkerID: 2}
	var evs []event.RouterEvent
	for i := uint64(1); i <= 40; i++ {
		// Each event replaces the previous block: live stays 4, operations grow.
		evs = append(evs, event.Stored(a, 2*i-1, nil, blk(10*i), blk(10*i+1), blk(10*i+2), blk(10*i+3)))
		evs = append(evs, event.Removed(a, 2*i, 10*i, 10*i+1, 10*i+2, 10*i+3))
	}
	for i := range evs {
		f.submit(evs[i])
		bi := evs[i]
		bi.WorkerID = b.WorkerID
		f.submit(bi)
	}
	if err := f.p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := cps.of(a); !ok {
		t.Fatal("rank a was never checkpointed")
	}
	if _, ok := cps.of(b); !ok {
		t.Fatal("rank b was never checkpointed")
	}
	// New epoch on a: id 1 below the cursor resets the rank.
	f.submit(event.Stored(a, 1, nil, blk(7)))
	if _, err := f.p.RemoveRank(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	f.close()

	f2 := open(t, fs, Options{Lanes: 2})
	defer f2.close()
	if got := f2.ix.RankBlocks(a); got != 1 {
		t.Fatalf("rank a holds %d blocks after the new epoch and a restart, want 1", got)
	}
	if snap, has, err := f2.log.ReadSnapshot(a); err != nil || (has && snap.LastEventID > 1) {
		t.Fatalf("rank a keeps a snapshot of its old epoch (at %d, %v)", snap.LastEventID, err)
	}
	if _, ok := f2.p.RankStatus(b); ok || f2.ix.RankBlocks(b) != 0 {
		t.Fatal("rank b is back after its removal")
	}
}

// TestRule6DamagedCheckpointOverAnUncutLogLosesNothing: a damaged snapshot is a recorded loss of
// the ids below the log cut only (docs/CONTRACT.md §5 lifecycle rule 6). A checkpoint over a log that was
// never cut covers nothing the log does not still hold: the rank restarts live, not degraded,
// with the same tree.
func TestRule6DamagedCheckpointOverAnUncutLogLosesNothing(t *testing.T) {
	fs := vfs.NewMem()
	var cps checkpoints
	f := open(t, fs, checkpointOptions(&cps))
	rng := rand.New(rand.NewPCG(3, 1))
	c := &chain{rk: event.Rank{WorkerID: 6}, rng: rng}
	var all []event.RouterEvent
	for range 200 {
		evs := c.events(1)
		f.submit(evs...)
		all = append(all, evs...)
	}
	if err := f.p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := cps.of(c.rk); !ok {
		t.Fatal("never checkpointed")
	}
	key := store.RankKey(store.PrefixSnapshot, c.rk)
	v, closer, err := f.st.DB().Get(key)
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(v)
	_ = closer.Close()
	damaged[len(damaged)/2] ^= 0xff
	if err := f.st.DB().Set(key, damaged, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	queries := queriesFrom(all, rng, 200)
	before := scoresOf(f.ix, queries)
	f.close()

	f2 := open(t, fs, Options{Lanes: 1})
	defer f2.close()
	st, ok := f2.p.RankStatus(c.rk)
	if !ok || st.Degraded || st.Lost != 0 || st.Last != c.id {
		t.Fatalf("after a damaged checkpoint over an uncut log: %+v, want live, nothing lost, last %d", st, c.id)
	}
	if after := scoresOf(f2.ix, queries); !reflect.DeepEqual(before, after) {
		t.Fatal("scores differ after dropping a damaged checkpoint")
	}
	if _, has, err := f2.log.ReadSnapshot(c.rk); err != nil || has {
		t.Fatalf("the damaged checkpoint is still there (has %v, err %v)", has, err)
	}
}
