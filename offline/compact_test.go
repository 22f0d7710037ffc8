package offline

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

// TestCompactCrashSafe crashes the file system (CrashClone keeps synced data and a random share
// of unsynced data) after every fold, just before Pebble's flush and compaction, and after
// compact returned; each crashed dir must open and rebuild the same dumps, scores and cursors as
// before compact. The last clone must also be clean for verify.
func TestCompactCrashSafe(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			fs := vfs.NewCrashableMem()
			randomDir(t, fs, seed)
			wantIx, wantCursors := rebuild(t, fs)
			want := dumps(t, wantIx)
			queries := paths(t, wantIx)
			wantScores := scores(wantIx, queries)

			var clones []*vfs.MemFS
			rng := rand.New(rand.NewPCG(seed, 1))
			crash := func() {
				clones = append(clones, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100), RNG: rng}))
			}
			res, err := Compact(bg, &bytes.Buffer{}, CompactOptions{Options: testOptions(fs), Listener: CompactListener{
				Folded:     func(event.Rank, uint64, uint64) { crash() },
				Compacting: crash,
			}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Folded == 0 {
				t.Fatal("nothing folded: the workload should leave log events behind")
			}
			crash() // after a complete compact
			for i, c := range clones {
				ix, cursors := rebuild(t, c)
				if got := dumps(t, ix); got != want {
					t.Fatalf("crash %d of %d: rebuilt dumps differ\ngot\n%s\nwant\n%s", i, len(clones), got, want)
				}
				if got := scores(ix, queries); got != wantScores {
					t.Fatalf("crash %d: scores differ", i)
				}
				if fmt.Sprint(cursors) != fmt.Sprint(wantCursors) {
					t.Fatalf("crash %d: cursors %v, want %v", i, cursors, wantCursors)
				}
			}
			var out bytes.Buffer
			if _, err := Verify(bg, &out, VerifyOptions{Options: testOptions(clones[len(clones)-1])}); err != nil {
				t.Fatalf("verify after compact: %v\n%s", err, out.String())
			}
			// A second compact folds nothing.
			res, err = Compact(bg, &bytes.Buffer{}, CompactOptions{Options: testOptions(fs)})
			if err != nil || res.Folded != 0 || res.EventsFolded != 0 {
				t.Fatalf("second compact: %+v, %v", res, err)
			}
		})
	}
}

// TestCompactCancelled cancels compact after its first fold: it returns the context's error and
// the dir still rebuilds the same tree.
func TestCompactCancelled(t *testing.T) {
	fs := vfs.NewMem()
	randomDir(t, fs, 11)
	wantIx, _ := rebuild(t, fs)
	want := dumps(t, wantIx)
	ctx, cancel := contextWithCancel()
	defer cancel()
	res, err := Compact(ctx, &bytes.Buffer{}, CompactOptions{Options: testOptions(fs), Listener: CompactListener{
		Folded: func(event.Rank, uint64, uint64) { cancel() },
	}})
	if !errors.Is(err, errCanceled) {
		t.Fatalf("compact after cancel: %v (%+v), want context.Canceled", err, res)
	}
	if res.Folded != 1 {
		t.Fatalf("folded %d ranks, want 1", res.Folded)
	}
	ix, _ := rebuild(t, fs)
	if got := dumps(t, ix); got != want {
		t.Fatalf("dumps after a cancelled compact differ")
	}
}

// TestCompactRefusesMissingDir: compact never creates a store where there was none.
func TestCompactRefusesMissingDir(t *testing.T) {
	fs := vfs.NewMem()
	_, err := Compact(bg, &bytes.Buffer{}, CompactOptions{Options: testOptions(fs)})
	if !errors.Is(err, store.ErrNoData) {
		t.Fatalf("compact of a missing dir: %v, want ErrNoData", err)
	}
	if _, err := fs.Stat(testDir); err == nil {
		t.Fatal("compact created the dir")
	}
}

// TestCompactKeepsStrandedRank: a rank holding blocks below a removed mid-chain block keeps its
// log (a snapshot could not express them); the other rank is folded; the state is unchanged.
func TestCompactKeepsStrandedRank(t *testing.T) {
	fs := vfs.NewMem()
	s := openRW(t, fs)
	stranded, plain := event.Rank{WorkerID: 1}, event.Rank{WorkerID: 2}
	b := func(h uint64) event.Block { return event.Block{BlockHash: h, TokensHash: h + 100} }
	if _, err := s.pipe.Submit(bg, []event.RouterEvent{
		event.Stored(stranded, 1, nil, b(1), b(2), b(3)),
		event.Removed(stranded, 2, 2),
		event.Stored(plain, 1, nil, b(1), b(2)),
	}); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	wantIx, _ := rebuild(t, fs)
	want := dumps(t, wantIx)
	var out bytes.Buffer
	res, err := Compact(bg, &out, CompactOptions{Options: testOptions(fs)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Folded != 1 || !bytes.Contains(out.Bytes(), []byte("rank 1/0: kept its log: it holds 2 blocks, only 1 reachable")) {
		t.Fatalf("folded %d; output:\n%s", res.Folded, out.String())
	}
	gotIx, _ := rebuild(t, fs)
	if got := dumps(t, gotIx); got != want || gotIx.RankBlocks(stranded) != 2 {
		t.Fatalf("state changed by compact:\n%s\nwant\n%s", got, want)
	}
}
