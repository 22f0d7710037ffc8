package recovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
)

// cutRank is the rank the cut tests log: event i stores block i (hash 100·i, a child of block
// i-1), so the state after event i holds exactly blocks 1..i.
var cutRank = event.Rank{WorkerID: 5, DPRank: 1}

const cutEvents = 6 // events logged
const cutAt = 3     // the cut the tables probe around (cutAt-1, cutAt, cutAt+1)

func cutEvent(i uint64) event.RouterEvent {
	var parent *uint64
	if i > 1 {
		p := (i - 1) * 100
		parent = &p
	}
	return event.Stored(cutRank, i, parent, event.Block{BlockHash: i * 100, TokensHash: i})
}

// cutLog opens a log on a fresh in-memory store holding events 1..cutEvents of cutRank.
func cutLog(t *testing.T) *wal.Log {
	t.Helper()
	st, err := store.Open("data", store.Options{FS: vfs.NewMem(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	l, err := wal.Open(st, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := l.NewBatch()
	defer b.Close()
	for i := uint64(1); i <= cutEvents; i++ {
		ev := cutEvent(i)
		b.Append(&ev)
	}
	if err := l.Commit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return l
}

// replayed replays cutRank up to upTo into a fresh state and describes it: the blocks it holds
// (a prefix 1..n of the chain when right), the events applied and the log blocks replayed.
func replayed(t *testing.T, l *wal.Log, upTo uint64) (string, error) {
	t.Helper()
	ts := tier.New(nil)
	rep, err := ReplayRank(context.Background(), l, ts, cutRank, upTo)
	if err != nil {
		return "", err
	}
	if rep.Damaged != nil {
		t.Fatalf("replay up to %d: damaged snapshot %v", upTo, rep.Damaged)
	}
	var max uint64
	if err := ts.DumpRank(cutRank, func(ev *event.RouterEvent) error {
		for _, b := range ev.Blocks {
			max = b.BlockHash / 100
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("blocks=%d upto-block=%d events=%d log-blocks=%d",
		ts.TierBlocks(cutRank)[event.TierDevice], max, rep.Events, rep.LogBlocks), nil
}

// logState describes what the log keeps of cutRank: its snapshot (id, blocks, events: a fold
// writes one dump event, a checkpoint one event per event it covers), its cut and its first
// retained event.
func logState(t *testing.T, l *wal.Log) string {
	t.Helper()
	m, err := l.RankMeta(cutRank)
	if err != nil {
		t.Fatal(err)
	}
	first, err := l.First(cutRank)
	if err != nil {
		t.Fatal(err)
	}
	snap, ok, err := l.ReadSnapshot(cutRank)
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, ev := range snap.Events {
		blocks += len(ev.Blocks)
	}
	if !ok {
		return fmt.Sprintf("no snapshot, first=%d", first)
	}
	return fmt.Sprintf("snapshot=%d (%d blocks in %d events) cut=%d first=%d", m.SnapshotID, blocks, len(snap.Events), m.Cut, first)
}

// TestReplayUpToTheCut: ReplayRank up to an id applies every event up to it, that one included,
// and none after; from a snapshot, the log after the snapshot's id only; a bound below the
// snapshot's id is refused (ErrSnapshotAhead), one equal to it is the snapshot alone.
func TestReplayUpToTheCut(t *testing.T) {
	for _, c := range []struct {
		name string
		prep func(t *testing.T, l *wal.Log) // the rank's snapshot, if any
		upTo uint64
		want string // or the error
		err  error
	}{
		{"log only, up to cut-1", nil, cutAt - 1, "blocks=2 upto-block=2 events=2 log-blocks=2", nil},
		{"log only, up to the cut", nil, cutAt, "blocks=3 upto-block=3 events=3 log-blocks=3", nil},
		{"log only, up to cut+1", nil, cutAt + 1, "blocks=4 upto-block=4 events=4 log-blocks=4", nil},
		{"log only, no bound", nil, 0, "blocks=6 upto-block=6 events=6 log-blocks=6", nil},
		{"log only, bound past the newest", nil, cutEvents + 1, "blocks=6 upto-block=6 events=6 log-blocks=6", nil},
		{"folded at the cut, up to cut-1", foldAt(cutAt), cutAt - 1, "", ErrSnapshotAhead},
		{"folded at the cut, up to the cut", foldAt(cutAt), cutAt, "blocks=3 upto-block=3 events=1 log-blocks=0", nil},
		{"folded at the cut, up to cut+1", foldAt(cutAt), cutAt + 1, "blocks=4 upto-block=4 events=2 log-blocks=1", nil},
		{"folded at the cut, no bound", foldAt(cutAt), 0, "blocks=6 upto-block=6 events=4 log-blocks=3", nil},
		// A checkpoint keeps the log it covers: the replay must not read it again.
		{"checkpoint at the cut, up to cut-1", checkpointAt(cutAt), cutAt - 1, "", ErrSnapshotAhead},
		{"checkpoint at the cut, up to the cut", checkpointAt(cutAt), cutAt, "blocks=3 upto-block=3 events=3 log-blocks=0", nil}, // its 3 events
		{"checkpoint at the cut, up to cut+1", checkpointAt(cutAt), cutAt + 1, "blocks=4 upto-block=4 events=4 log-blocks=1", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := cutLog(t)
			if c.prep != nil {
				c.prep(t, l)
			}
			got, err := replayed(t, l, c.upTo)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("replay up to %d: %q, %v; want %v", c.upTo, got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("replay up to %d: %q, %v; want %q", c.upTo, got, err, c.want)
			}
		})
	}
}

// TestFoldUpToTheCut: Fold up to an id writes the state after that event (that one included) as
// the snapshot and deletes the log up to it, keeping the events after it; a rank whose snapshot
// is already at the id or later only trims its log (the snapshot is neither rewritten nor moved
// backwards). Either way a replay still rebuilds every event.
func TestFoldUpToTheCut(t *testing.T) {
	for _, c := range []struct {
		name string
		prep func(t *testing.T, l *wal.Log)
		upTo uint64
		want string
	}{
		{"log only, fold cut-1", nil, cutAt - 1, "snapshot=2 (2 blocks in 1 events) cut=3 first=3"},
		{"log only, fold the cut", nil, cutAt, "snapshot=3 (3 blocks in 1 events) cut=4 first=4"},
		{"log only, fold cut+1", nil, cutAt + 1, "snapshot=4 (4 blocks in 1 events) cut=5 first=5"},
		{"log only, fold the newest", nil, cutEvents, "snapshot=6 (6 blocks in 1 events) cut=7 first=0"},
		{"folded at the cut, fold cut-1", foldAt(cutAt), cutAt - 1, "snapshot=3 (3 blocks in 1 events) cut=4 first=4"},
		{"folded at the cut, fold the cut", foldAt(cutAt), cutAt, "snapshot=3 (3 blocks in 1 events) cut=4 first=4"},
		{"folded at the cut, fold cut+1", foldAt(cutAt), cutAt + 1, "snapshot=4 (4 blocks in 1 events) cut=5 first=5"},
		{"checkpoint at the cut, fold cut-1", checkpointAt(cutAt), cutAt - 1, "snapshot=3 (3 blocks in 3 events) cut=3 first=3"},
		{"checkpoint at the cut, fold the cut", checkpointAt(cutAt), cutAt, "snapshot=3 (3 blocks in 3 events) cut=4 first=4"}, // trimmed, not rewritten
		{"checkpoint at the cut, fold cut+1", checkpointAt(cutAt), cutAt + 1, "snapshot=4 (4 blocks in 1 events) cut=5 first=5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := cutLog(t)
			if c.prep != nil {
				c.prep(t, l)
			}
			if err := Fold(context.Background(), l, cutRank, c.upTo); err != nil {
				t.Fatalf("fold up to %d: %v", c.upTo, err)
			}
			if got := logState(t, l); got != c.want {
				t.Fatalf("after fold up to %d: %s, want %s", c.upTo, got, c.want)
			}
			got, err := replayed(t, l, 0)
			if err != nil || got[:len("blocks=6 upto-block=6")] != "blocks=6 upto-block=6" {
				t.Fatalf("replay after fold up to %d: %q, %v; want every event's block", c.upTo, got, err)
			}
		})
	}
}

// foldAt folds cutRank's log up to id (snapshot at id, log cut at id+1).
func foldAt(id uint64) func(t *testing.T, l *wal.Log) {
	return func(t *testing.T, l *wal.Log) {
		t.Helper()
		if err := Fold(context.Background(), l, cutRank, id); err != nil {
			t.Fatalf("fold up to %d: %v", id, err)
		}
	}
}

// checkpointAt writes cutRank's state after event id as a checkpoint: a snapshot at id that
// keeps the log (the lanes' online checkpoint).
func checkpointAt(id uint64) func(t *testing.T, l *wal.Log) {
	return func(t *testing.T, l *wal.Log) {
		t.Helper()
		var enc wal.SnapshotEncoder
		for i := uint64(1); i <= id; i++ {
			ev := cutEvent(i)
			enc.Add(&ev)
		}
		if err := l.WriteCheckpoint(context.Background(), cutRank, id, &enc); err != nil {
			t.Fatalf("checkpoint at %d: %v", id, err)
		}
	}
}
