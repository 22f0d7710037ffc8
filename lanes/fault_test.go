package lanes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/testutil"
)

// TestCommitFailureAppliesNothing: WAL syncs start failing while producers submit. The submit
// that hits it gets an error, the lane refuses later writes (and Failure reports it), the tree
// holds exactly the acknowledged events, and after a restart every acknowledged event is there.
func TestCommitFailureAppliesNothing(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	mem := vfs.NewCrashableMem()
	fs, on := testutil.FailingWAL(mem, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo, errorfs.OpFileWrite)
	f := open(t, fs, Options{Lanes: 2})
	const producers = 4
	var mu sync.Mutex
	acked := map[event.Rank][]event.RouterEvent{}
	chains := make([]*chain, producers)
	var wg sync.WaitGroup
	failed := make([]error, producers)
	for g := range producers {
		chains[g] = &chain{rk: event.Rank{WorkerID: uint64(g)}, next: uint64(g) * 1_000_000, rng: rand.New(rand.NewPCG(seed, uint64(g)))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				evs := chains[g].events(3)
				if _, err := f.p.Submit(context.Background(), evs); err != nil {
					failed[g] = err
					return
				}
				mu.Lock()
				acked[chains[g].rk] = append(acked[chains[g].rk], evs...)
				mu.Unlock()
			}
		}()
	}
	// Fail once every producer has a seeded number of acknowledged submits (a sleep alone may
	// fail the WAL before anything was acknowledged on a busy machine).
	n := 1 + rand.New(rand.NewPCG(seed, 99)).IntN(10)
	for _, c := range chains {
		waitFor(t, 30*time.Second, fmt.Sprintf("producer of rank %v acknowledged %d submits", c.rk, n), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(acked[c.rk]) >= 3*n // 3 events a submit
		})
	}
	if err := f.p.Failure(); err != nil {
		t.Fatalf("Failure before any failed commit: %v", err)
	}
	on.Store(true)
	waitGroup(t, &wg, 30*time.Second, "producers submitting after the WAL started failing (a failed commit did not fail their submits)")
	for g, err := range failed {
		if err == nil {
			t.Fatalf("producer %d stopped without an error", g)
		}
	}
	// A later submit fails too: the lanes refuse writes after a failed commit.
	if _, err := f.p.Submit(context.Background(), []event.RouterEvent{event.Stored(event.Rank{WorkerID: 77}, 1, nil, blk(1))}); err == nil {
		t.Fatal("submit after a failed commit succeeded")
	}
	if f.p.Failure() == nil {
		t.Fatal("Failure is nil after a failed commit")
	}
	model := testutil.NewModel()
	for _, evs := range acked {
		for i := range evs {
			model.Apply(&evs[i])
		}
	}
	// Without any further op on the lanes, each rank is rolled back to its last acknowledged id
	// (the lane's decider is woken by the failed commit itself).
	for _, c := range chains {
		want := uint64(0)
		if evs := acked[c.rk]; len(evs) > 0 {
			want = evs[len(evs)-1].EventID
		}
		waitFor(t, 5*time.Second, fmt.Sprintf("rank %v rolled back to its last acknowledged id %d", c.rk, want),
			func() bool { st, _ := f.p.RankStatus(c.rk); return st.Last == want },
			func() string { st, _ := f.p.RankStatus(c.rk); return fmt.Sprintf("it lists id %d", st.Last) })
	}
	for _, c := range chains {
		if got, want := f.ix.RankBlocks(c.rk), uint64(model.Held(c.rk)); got != want {
			t.Fatalf("rank %v: tree holds %d blocks, acknowledged events hold %d", c.rk, got, want)
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	f.p.Close()
	_ = f.st.Close()
	f2 := open(t, crashed, Options{Lanes: 2})
	defer f2.close()
	for _, c := range chains {
		evs := acked[c.rk]
		if len(evs) == 0 {
			continue
		}
		st, ok := f2.p.RankStatus(c.rk)
		if !ok || st.Last < evs[len(evs)-1].EventID {
			t.Fatalf("rank %v after restart: %+v, last acknowledged %d", c.rk, st, evs[len(evs)-1].EventID)
		}
	}
}
