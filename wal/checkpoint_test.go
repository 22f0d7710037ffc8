package wal

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
)

func encoderOf(evs ...event.RouterEvent) *SnapshotEncoder {
	var e SnapshotEncoder
	for i := range evs {
		e.Add(&evs[i])
	}
	return &e
}

// TestCheckpointKeepsTheLogAndNeverMovesBack checks the checkpoint rules (wal/doc.go): a
// checkpoint writes the snapshot and its id but deletes no log event and sets no cut; it is
// refused (ErrStaleSnapshot) below the snapshot it would replace or below the cut; TrimLog cuts
// only what a snapshot covers and keeps the snapshot.
func TestCheckpointKeepsTheLogAndNeverMovesBack(t *testing.T) {
	st, l := openLog(t, vfs.NewMem(), Sync)
	defer st.Close()
	r := event.Rank{WorkerID: 7, DPRank: 1}
	b := l.NewBatch()
	for id := uint64(1); id <= 6; id++ {
		ev := realisticEvent(r, id)
		b.Append(&ev)
	}
	if err := l.Commit(bg, b); err != nil {
		t.Fatal(err)
	}
	if err := l.WriteCheckpoint(bg, r, 4, encoderOf(realisticEvent(r, 0))); err != nil {
		t.Fatal(err)
	}
	snap, ok, err := l.ReadSnapshot(r)
	if err != nil || !ok || snap.LastEventID != 4 || len(snap.Events) != 1 {
		t.Fatalf("checkpoint read back: %+v %v %v", snap, ok, err)
	}
	meta, err := l.RankMeta(r)
	if err != nil || meta.SnapshotID != 4 || meta.Cut != 0 {
		t.Fatalf("meta after a checkpoint: %+v %v, want snapshot id 4 and no cut", meta, err)
	}
	if first, _ := l.First(r); first != 1 {
		t.Fatalf("a checkpoint deleted log events: first %d", first)
	}
	if err := l.WriteCheckpoint(bg, r, 3, encoderOf()); !errors.Is(err, ErrStaleSnapshot) {
		t.Fatalf("a checkpoint behind the snapshot: %v, want ErrStaleSnapshot", err)
	}
	if err := l.TrimLog(bg, r, 5); !errors.Is(err, ErrStaleSnapshot) {
		t.Fatalf("trimming past the snapshot: %v, want ErrStaleSnapshot", err)
	}
	if err := l.TrimLog(bg, r, 2); err != nil {
		t.Fatal(err)
	}
	if first, _ := l.First(r); first != 3 {
		t.Fatalf("after TrimLog(2): first %d, want 3", first)
	}
	if meta, _ := l.RankMeta(r); meta.Cut != 3 || meta.SnapshotID != 4 {
		t.Fatalf("after TrimLog(2): %+v, want cut 3 and the snapshot at 4", meta)
	}
	// The cut is 3: a checkpoint at 2 would cover less than the deleted prefix.
	if err := l.WriteCheckpoint(bg, r, 1, encoderOf()); !errors.Is(err, ErrStaleSnapshot) {
		t.Fatalf("a checkpoint below the cut: %v, want ErrStaleSnapshot", err)
	}
	if err := l.WriteCheckpoint(bg, r, 6, encoderOf()); err != nil {
		t.Fatal(err)
	}
	if first, _ := l.First(r); first != 3 {
		t.Fatalf("a checkpoint moved the cut: first %d", first)
	}
}
