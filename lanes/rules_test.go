package lanes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
)

// TestRule6DamagedSnapshotIsARecordedLoss (docs/CONTRACT.md §5 lifecycle rule 6; bug 5 of issue 11): after a
// fold and a flipped snapshot byte, the rank restarts degraded with the ids the snapshot covered
// recorded lost in its durable ledger, instead of restarting live with 0 blocks and no entry.
func TestRule6DamagedSnapshotIsARecordedLoss(t *testing.T) {
	fs := vfs.NewMem()
	f := open(t, fs, Options{Lanes: 1})
	r := event.Rank{WorkerID: 4}
	f.submit(event.Stored(r, 1, nil, blk(1)), event.Stored(r, 2, ptr(1), blk(2)), event.Stored(r, 3, ptr(2), blk(3)))
	if err := f.p.Do(context.Background(), r, func() {
		if err := recovery.Fold(context.Background(), f.log, r, 2); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	key := store.RankKey(store.PrefixSnapshot, r)
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
	f.close()

	f2 := open(t, fs, Options{Lanes: 1})
	defer f2.close()
	st, ok := f2.p.RankStatus(r)
	if !ok || st.State != recovery.StateDegraded || !st.Degraded || st.Lost != 1 || st.Last != 3 {
		t.Fatalf("after a damaged snapshot: %+v (listed %v), want degraded, last 3, one lost gap", st, ok)
	}
	meta, err := f2.log.RankMeta(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(meta.Gaps) != 1 || meta.Gaps[0].Outcome != wal.GapLost || meta.Gaps[0].From != 0 || meta.Gaps[0].To != 2 || !meta.Cursor.Degraded {
		t.Fatalf("durable ledger %+v cursor %+v, want lost 0-2 and a degraded cursor", meta.Gaps, meta.Cursor)
	}
	if _, has, err := f2.log.ReadSnapshot(r); err != nil || has {
		t.Fatalf("the damaged snapshot is still there (has %v, err %v)", has, err)
	}
}

// TestRule9ClosingNeverHangsACaller (docs/CONTRACT.md §5 lifecycle rule 9; bug 8 of issue 11): submits that
// race with Close, including ones blocked on a full lane, return (nil or ErrClosed), never hang.
func TestRule9ClosingNeverHangsACaller(t *testing.T) {
	for round := range 20 {
		f := open(t, vfs.NewMem(), Options{Lanes: 1, QueueDepth: 1})
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := event.Rank{WorkerID: uint64(i)}
				_, err := f.p.Submit(context.Background(), []event.RouterEvent{event.Stored(r, 1, nil, blk(uint64(i)))})
				errs <- err
			}()
		}
		if round%2 == 1 {
			time.Sleep(time.Duration(round) * 100 * time.Microsecond)
		}
		f.close()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: a submit racing Close hangs", round)
		}
		close(errs)
		for err := range errs {
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Fatalf("round %d: submit racing Close: %v", round, err)
			}
		}
	}
}

// TestRule5ReadsNeverCreateState (docs/CONTRACT.md §5 lifecycle rule 5; bug 4 of issue 11): Do, RankStatus
// and LaneOf for an unknown rank register nothing.
func TestRule5ReadsNeverCreateState(t *testing.T) {
	f := open(t, vfs.NewMem(), Options{Lanes: 2})
	defer f.close()
	for i := range 100 {
		r := event.Rank{WorkerID: uint64(1000 + i)}
		if err := f.p.Do(context.Background(), r, func() { t.Error("fn ran for an unknown rank") }); !errors.Is(err, ErrUnknownRank) {
			t.Fatalf("Do on an unknown rank: %v", err)
		}
		if _, ok := f.p.RankStatus(r); ok {
			t.Fatal("RankStatus answered an unknown rank")
		}
		if _, ok := f.p.LaneOf(r); ok {
			t.Fatal("LaneOf assigned a lane to an unknown rank")
		}
	}
	f.p.mu.RLock()
	n := len(f.p.ranks)
	f.p.mu.RUnlock()
	if n != 0 || len(f.p.Status()) != 0 {
		t.Fatalf("reads registered %d ranks", n)
	}
}

// TestEpochIsCountedAndPersisted (issue 11 bug 8: wal.Cursor.Epoch was always 0): a publisher
// restart (id 1 after a higher id) counts an epoch in the rank's status and durable cursor, and
// a restart keeps it.
func TestEpochIsCountedAndPersisted(t *testing.T) {
	fs := vfs.NewMem()
	f := open(t, fs, Options{Lanes: 1})
	r := event.Rank{WorkerID: 6}
	f.submit(event.Stored(r, 1, nil, blk(1)), event.Stored(r, 2, ptr(1), blk(2)))
	f.submit(event.Stored(r, 1, nil, blk(5))) // the publisher restarted
	f.submit(event.Stored(r, 5, nil, blk(6)), event.Stored(r, 1, nil, blk(7)))
	if st, _ := f.p.RankStatus(r); st.Epoch != 2 {
		t.Fatalf("epoch %d after two publisher restarts, want 2", st.Epoch)
	}
	f.close()
	f2 := open(t, fs, Options{Lanes: 1})
	defer f2.close()
	meta, err := f2.log.RankMeta(r)
	if err != nil || meta.Cursor.Epoch != 2 {
		t.Fatalf("durable cursor %+v (%v), want epoch 2", meta.Cursor, err)
	}
	if st, _ := f2.p.RankStatus(r); st.Epoch != 2 {
		t.Fatalf("epoch %d after restart, want 2", st.Epoch)
	}
}

// stubbornFetcher answers each fetch when the test says, ignoring cancellation (a slow upstream
// whose answer arrives late).
type stubbornFetcher struct {
	calls chan chan recovery.Answer
	stop  chan struct{} // closed at the end of the test: unanswered fetches give up
}

func (f *stubbornFetcher) Fetch(_ context.Context, _ string, _ event.Rank, _ *uint64, _ int) (recovery.Answer, error) {
	ch := make(chan recovery.Answer)
	f.calls <- ch
	select {
	case a := <-ch:
		return a, nil
	case <-f.stop:
		return recovery.Answer{Kind: recovery.AnswerFailed}, errors.New("test over")
	}
}

// TestRule4LateAnswerOfARemovedIncarnationIsDiscarded (docs/CONTRACT.md §5 lifecycle rule 4): a rank removed
// while its restore is in flight and written again starts a new restore; the old restore's
// answer, arriving late, must not be taken for the new one's (fetch tokens continue across the
// removal instead of starting again at 1).
func TestRule4LateAnswerOfARemovedIncarnationIsDiscarded(t *testing.T) {
	f0 := &stubbornFetcher{calls: make(chan chan recovery.Answer, 4), stop: make(chan struct{})}
	outcomes := make(chan string, 4) // the lane's word on each fetch answer it took (Listener.Fetch)
	f := open(t, vfs.NewMem(), Options{Lanes: 1, Fetcher: f0, Source: func(uint64) string { return "http://upstream" },
		Listener: Listener{Fetch: func(_ event.Rank, _ bool, _ time.Duration, outcome string) { outcomes <- outcome }}})
	defer f.close()
	defer close(f0.stop) // runs first: no fetch holds Close up
	r := event.Rank{WorkerID: 7}
	f.submit(event.Stored(r, 1, nil, blk(1)))
	old := <-f0.calls
	if n, err := f.p.RemoveWorker(context.Background(), 7); err != nil || n != 1 {
		t.Fatalf("remove: %d %v", n, err)
	}
	f.submit(event.Stored(r, 20, nil, blk(20)))
	fresh := <-f0.calls
	old <- recovery.Answer{Kind: recovery.AnswerTreeDump, LastEventID: 19, Events: []event.RouterEvent{event.Stored(r, 0, nil, blk(666))}}
	// The late answer reaches the lane, which must discard it (not end the new restore with it).
	select {
	case got := <-outcomes:
		if got != "discarded" {
			t.Fatalf("the lane took the old incarnation's late answer as %q, want it discarded", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the old incarnation's late answer did not reach the lane within 5 s")
	}
	if st, _ := f.p.RankStatus(r); st.State != recovery.StateRecovering {
		t.Fatalf("the old incarnation's answer ended the new restore: %+v", st)
	}
	select {
	case fresh <- recovery.Answer{Kind: recovery.AnswerTreeDump, LastEventID: 19, Events: []event.RouterEvent{event.Stored(r, 0, nil, blk(5))}}:
	case <-time.After(5 * time.Second):
		t.Fatal("the new restore's fetch is no longer waiting for its answer")
	}
	waitFor(t, 5*time.Second, "the new restore is applied (rank live at 20)",
		func() bool { st, _ := f.p.RankStatus(r); return st.State == recovery.StateLive && st.Last == 20 },
		func() string { st, _ := f.p.RankStatus(r); return fmt.Sprintf("status %+v", st) })
	if got := <-outcomes; got != "treedump" {
		t.Fatalf("the new restore's answer was taken as %q, want treedump", got)
	}
	_ = f.p.Flush(context.Background())
	var got []uint64
	_ = f.ix.DumpRank(r, func(ev *event.RouterEvent) error {
		for _, b := range ev.Blocks {
			got = append(got, b.BlockHash)
		}
		return nil
	})
	if len(got) != 2 || got[0] == 666 || got[1] == 666 {
		t.Fatalf("rank holds %v, want the new dump's block 5 and event 20's block 20", got)
	}
}
