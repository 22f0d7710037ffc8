package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

// copyFormat1 copies the committed format-1 data dir (testdata/format1, written by the last
// format-1 binary) to a temp dir.
func copyFormat1(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dst, os.DirFS("../testdata/format1/datadir")); err != nil {
		t.Fatal(err)
	}
	return dst
}

type format1Rank struct {
	rank     event.Rank
	first    uint64
	last     uint64
	gaps     int
	snapshot uint64
	degraded bool
}

// checkFormat1Content checks the upgraded dir holds what the format-1 binary wrote (SOURCE.md).
func checkFormat1Content(t *testing.T, l *Log) {
	t.Helper()
	ranks, err := l.Ranks()
	if err != nil {
		t.Fatal(err)
	}
	want := []format1Rank{
		{rank: event.Rank{WorkerID: 1}, first: 9, last: 12, snapshot: 8},
		{rank: event.Rank{WorkerID: 1, DPRank: 1}, first: 5, last: 5, gaps: 1, degraded: true},
		{rank: event.Rank{WorkerID: 2}, first: 1, last: 2},
	}
	if len(ranks) != len(want) {
		t.Fatalf("ranks after upgrade: %v", ranks)
	}
	for i, w := range want {
		if ranks[i] != w.rank {
			t.Fatalf("rank %d is %v, want %v", i, ranks[i], w.rank)
		}
		first, _ := l.First(w.rank)
		last, _ := l.Last(w.rank)
		meta, err := l.RankMeta(w.rank)
		if err != nil {
			t.Fatalf("rank %v: %v", w.rank, err)
		}
		if first != w.first || last != w.last || len(meta.Gaps) != w.gaps || meta.SnapshotID != w.snapshot || meta.Cursor.Degraded != w.degraded {
			t.Errorf("rank %v: first %d last %d gaps %d snapshot %d cursor %+v; want %+v", w.rank, first, last, len(meta.Gaps), meta.SnapshotID, meta.Cursor, w)
		}
		if w.snapshot > 0 {
			snap, ok, err := l.ReadSnapshot(w.rank)
			if err != nil || !ok || snap.LastEventID != w.snapshot {
				t.Errorf("rank %v snapshot: %+v %v %v", w.rank, snap.LastEventID, ok, err)
			}
		}
		if err := l.Range(w.rank, 0, 0, func(*event.RouterEvent) error { return nil }); err != nil {
			t.Errorf("rank %v log: %v", w.rank, err)
		}
	}
	if m, err := l.RankMeta(event.Rank{WorkerID: 4}); err != nil || !m.Removed {
		t.Errorf("worker 4's tombstone: %+v %v", m, err)
	}
	src, ok, err := l.Meta("source/3")
	if err != nil || !ok || string(src) != "http://127.0.0.1:9" {
		t.Errorf("worker 3's source: %q %v %v", src, ok, err)
	}
}

// TestUpgradeFormat1InPlace: a data dir written by the last format-1 binary opens read-write,
// is upgraded to format 2 (partition 0 in every rank key, crcs re-sealed) and reads back
// everything it held; a read-only open of a format-1 dir is refused with a clear error.
func TestUpgradeFormat1InPlace(t *testing.T) {
	dir := copyFormat1(t)
	if _, err := store.Open(dir, store.Options{ReadOnly: true, Logger: quietLogger()}); err == nil {
		t.Fatal("a read-only open of a format-1 dir must be refused")
	}
	st, err := store.Open(dir, store.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(st, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if st.Version() != store.FormatV4 { // 4 → 5 is the engine's (worker.Upgrade)
		t.Fatalf("version %d after the upgrade", st.Version())
	}
	checkFormat1Content(t, l)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened (format 2 now), read-only too.
	st, err = store.Open(dir, store.Options{ReadOnly: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err = Open(st, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	checkFormat1Content(t, l)
}

// TestUpgradeFormat1Resumes: an upgrade interrupted after some batches (a crash: the version
// record still says 1, some keys moved) completes on the next open with the same result.
func TestUpgradeFormat1Resumes(t *testing.T) {
	dir := copyFormat1(t)
	st, err := store.Open(dir, store.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// Move the log keys only, as a crash after the first batch would leave it.
	lo, hi := store.PrefixBounds(store.PrefixLog)
	if n, err := upgradeBatch(st.DB(), lo, hi); err != nil || n == 0 {
		t.Fatalf("partial upgrade moved %d: %v", n, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = store.Open(dir, store.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Version() != store.FormatV1 {
		t.Fatalf("a partial upgrade must leave version 1, got %d", st.Version())
	}
	l, err := Open(st, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	checkFormat1Content(t, l)
}

// TestUpgradeFormat2InPlace: a data dir written by the last format-2 binary (testdata/format2,
// before KV-cache groups in log records) opens read-only as it is, and read-write is set to
// format 3; its records read back with no group metadata.
func TestUpgradeFormat2InPlace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS("../testdata/format2/datadir")); err != nil {
		t.Fatal(err)
	}
	check := func(l *Log) {
		t.Helper()
		ranks, err := l.Ranks()
		if err != nil || len(ranks) != 2 {
			t.Fatalf("ranks %v %v", ranks, err)
		}
		for _, w := range []struct {
			rank              event.Rank
			first, last, snap uint64
		}{{event.Rank{WorkerID: 1}, 9, 12, 8}, {event.Rank{WorkerID: 2}, 1, 2, 0}} {
			first, _ := l.First(w.rank)
			last, _ := l.Last(w.rank)
			meta, err := l.RankMeta(w.rank)
			if err != nil || first != w.first || last != w.last || meta.SnapshotID != w.snap {
				t.Fatalf("rank %v: first %d last %d snapshot %d %v", w.rank, first, last, meta.SnapshotID, err)
			}
			if err := l.Range(w.rank, 0, 0, func(ev *event.RouterEvent) error {
				if ev.HasGroup {
					t.Fatalf("rank %v event %d has a group", w.rank, ev.EventID)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ro, err := store.Open(dir, store.Options{ReadOnly: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(ro, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if ro.Version() != store.FormatV2 {
		t.Fatalf("read-only open: version %d", ro.Version())
	}
	check(l)
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir, store.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if l, err = Open(st, Options{Logger: quietLogger()}); err != nil {
		t.Fatal(err)
	}
	if st.Version() != store.FormatV4 { // 4 → 5 is the engine's (worker.Upgrade)
		t.Fatalf("version %d after the upgrade", st.Version())
	}
	check(l)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeFormat3InPlace: a data dir of the last format-3 binary (testdata/format3, one
// version-1 record per event) opens read-only as it is; read-write it is set to format 4 without
// rewriting a record, its records read back as groups of one, and new group records continue
// its logs (a retention cut through both kinds of record keeps per-event ids).
func TestUpgradeFormat3InPlace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS("../testdata/format3/datadir")); err != nil {
		t.Fatal(err)
	}
	type span struct {
		rank        event.Rank
		first, last uint64
		snap        uint64
	}
	written := []span{ // testdata/format3/SOURCE.md
		{event.Rank{WorkerID: 1}, 9, 12, 8},
		{event.Rank{WorkerID: 2}, 1, 2, 0},
		{event.Rank{WorkerID: 3, DPRank: 1}, 1, 2, 0},
		{event.Rank{WorkerID: 4}, 5, 5, 0},
		{event.Rank{WorkerID: 5}, 1, 3, 0},
	}
	check := func(l *Log, want []span) {
		t.Helper()
		ranks, err := l.Ranks()
		if err != nil || len(ranks) != len(want) {
			t.Fatalf("ranks %v %v", ranks, err)
		}
		for _, w := range want {
			first, _ := l.First(w.rank)
			last, _ := l.Last(w.rank)
			meta, err := l.RankMeta(w.rank)
			if err != nil || first != w.first || last != w.last || meta.SnapshotID != w.snap {
				t.Fatalf("rank %v: first %d last %d snapshot %d %v, want %+v", w.rank, first, last, meta.SnapshotID, err, w)
			}
			next := w.first
			if err := l.Range(w.rank, 0, 0, func(ev *event.RouterEvent) error {
				if ev.EventID != next {
					return fmt.Errorf("event %d, want %d", ev.EventID, next)
				}
				next++
				return nil
			}); err != nil || next != w.last+1 {
				t.Fatalf("rank %v log: read up to %d: %v", w.rank, next, err)
			}
		}
	}
	ro, l := openDirLog(t, dir, true)
	if ro.Version() != store.FormatV3 {
		t.Fatalf("read-only open: version %d", ro.Version())
	}
	check(l, written)
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	st, l := openDirLog(t, dir, false)
	if st.Version() != store.FormatV4 { // 4 → 5 is the engine's (worker.Upgrade)
		t.Fatalf("version %d after the upgrade", st.Version())
	}
	check(l, written)
	// Worker 1 continues with a group record 13..16 after its format-3 records 9..12; a cut at
	// 14 deletes 9..12 and trims the group to 15..16.
	r := event.Rank{WorkerID: 1}
	b := l.NewBatch()
	for id := uint64(13); id <= 16; id++ {
		ev := realisticEvent(r, id)
		b.Append(&ev)
	}
	if err := l.Commit(bg, b); err != nil {
		t.Fatal(err)
	}
	b.Close()
	after := append([]span(nil), written...)
	after[0].last = 16
	check(l, after)
	if err := l.WriteSnapshot(bg, r, 14, nil); err != nil {
		t.Fatal(err)
	}
	after[0].first, after[0].snap = 15, 14
	check(l, after)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// Format 4 now, read-only too.
	ro, l = openDirLog(t, dir, true)
	defer ro.Close()
	if ro.Version() != store.FormatV4 {
		t.Fatalf("reopened: version %d", ro.Version())
	}
	check(l, after)
}

// openDirLog opens the store in dir (read-only or not) and its log.
func openDirLog(t *testing.T, dir string, readOnly bool) (*store.Store, *Log) {
	t.Helper()
	st, err := store.Open(dir, store.Options{ReadOnly: readOnly, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(st, Options{Logger: quietLogger()})
	if err != nil {
		_ = st.Close()
		t.Fatal(err)
	}
	return st, l
}
