package offline

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/lanes"
	"github.com/kvindex/kvindex/wal"
)

// checkpointedDir fills a data dir through a pipeline that checkpoints online (lanes
// Options.CheckpointRatio) and never folds: snapshots newer than a cut that never moved.
//
// A checkpoint is written on a goroutine of its own, one at a time per lane, after the batch that
// triggered it was acknowledged: neither Submit nor Flush waits for it, and a rank whose eligible
// batches all find another rank's write still in flight gets none. So each rank is fed in a
// session of its own, which ends with Pipeline.Close, and Close waits for the write in flight:
// in its session the rank's first eligible batch finds the lane idle, its checkpoint is put in
// flight, and it is on disk when the test looks, however loaded the machine is.
func checkpointedDir(t *testing.T, fs vfs.FS) []event.Rank {
	t.Helper()
	rng := rand.New(rand.NewPCG(11, 4))
	next := uint64(1000)
	var ranks []event.Rank
	for w := range uint64(3) {
		s := openRWWith(t, fs, lanes.Options{Lanes: 1, Logger: quiet(), CheckpointRatio: 0.5, CheckpointMinBlocks: 8})
		r := event.Rank{WorkerID: w + 1}
		ranks = append(ranks, r)
		var held []uint64
		for id := uint64(1); id <= 120; id++ {
			var ev event.RouterEvent
			if len(held) > 6 && rng.IntN(3) == 0 {
				i := rng.IntN(len(held))
				ev = event.Removed(r, id, held[i])
				held = append(held[:i], held[i+1:]...)
			} else {
				next++
				ev = event.Stored(r, id, nil, event.Block{BlockHash: next, TokensHash: uint64(rng.IntN(50))})
				held = append(held, next)
			}
			if _, err := s.pipe.Submit(bg, []event.RouterEvent{ev}); err != nil {
				t.Fatal(err)
			}
		}
		s.close(t) // waits for the checkpoint write in flight
	}
	s := openRW(t, fs)
	defer s.close(t)
	for _, r := range ranks {
		m, err := s.log.RankMeta(r)
		if err != nil {
			t.Fatal(err)
		}
		if m.SnapshotID == 0 || m.Cut != 0 {
			t.Fatalf("rank %v: snapshot at %d, cut %d: want a checkpoint over an uncut log", r, m.SnapshotID, m.Cut)
		}
	}
	return ranks
}

// TestVerifyAndCompactWithCheckpoints checks the offline tools on a dir whose snapshots are
// online checkpoints (newer than the log cut, the log under them retained): verify finds it clean
// and checks each checkpoint against the replay of the log it was taken from (a checkpoint that is
// a valid dump of another state is a problem), and compact trims the retained log keeping the
// same tree.
func TestVerifyAndCompactWithCheckpoints(t *testing.T) {
	fs := vfs.NewMem()
	ranks := checkpointedDir(t, fs)
	var out bytes.Buffer
	if _, err := Verify(bg, &out, VerifyOptions{Options: testOptions(fs)}); err != nil {
		t.Fatalf("verify a checkpointed dir: %v\n%s", err, out.String())
	}
	wantIx, _ := rebuild(t, fs)
	want := dumps(t, wantIx)

	res, err := Compact(bg, &bytes.Buffer{}, CompactOptions{Options: testOptions(fs)})
	if err != nil || res.Folded != len(ranks) {
		t.Fatalf("compact: %+v, %v; want every rank folded", res, err)
	}
	ix, _ := rebuild(t, fs)
	if got := dumps(t, ix); got != want {
		t.Fatalf("after compact the dumps differ\ngot\n%s\nwant\n%s", got, want)
	}

	// A checkpoint that is a well-formed dump, but not of the log's state at its id.
	fs2 := vfs.NewMem()
	ranks = checkpointedDir(t, fs2)
	s := openRW(t, fs2)
	m, err := s.log.RankMeta(ranks[0])
	if err != nil {
		t.Fatal(err)
	}
	var enc wal.SnapshotEncoder
	ev := event.Stored(ranks[0], 0, nil, event.Block{BlockHash: 1, TokensHash: 2})
	enc.Add(&ev)
	if err := s.log.WriteCheckpoint(bg, ranks[0], m.SnapshotID, &enc); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	out.Reset()
	if _, err := Verify(bg, &out, VerifyOptions{Options: testOptions(fs2)}); !errors.Is(err, ErrProblems) || !strings.Contains(out.String(), "is not the replay of the log") {
		t.Fatalf("verify a wrong checkpoint: %v\n%s", err, out.String())
	}
}
