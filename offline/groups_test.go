package offline

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/lanes"
)

// TestExportDumpOfSeveralMainGroups: `kvindex export --what dump` rebuilds a rank through the
// lanes' KV-cache group gate, so a rank of two main groups dumps the blocks both hold (what the
// server answers with), not the union of its groups; `--what events` keeps every group;
// `compact` folds it into a snapshot of each group's blocks that `verify` finds clean and a
// restarted pipeline reads back.
func TestExportDumpOfSeveralMainGroups(t *testing.T) {
	fs := vfs.NewMem()
	s := openRWWith(t, fs, lanes.Options{Lanes: 1, Logger: quiet()})
	r := event.Rank{WorkerID: 3}
	g := func(ev event.RouterEvent, idx uint32) event.RouterEvent {
		ev.HasGroup, ev.Group = true, event.Group{Idx: idx, Kind: event.GroupKindFullAttention}
		return ev
	}
	parent := uint64(71)
	if _, err := s.pipe.Submit(bg, []event.RouterEvent{
		g(event.Stored(r, 1, nil, event.Block{BlockHash: 71, TokensHash: 1}, event.Block{BlockHash: 72, TokensHash: 2}), 0),
		g(event.Stored(r, 2, nil, event.Block{BlockHash: 71, TokensHash: 1}), 1),
		g(event.Stored(r, 3, &parent, event.Block{BlockHash: 73, TokensHash: 3}), 1),
	}); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	var dump bytes.Buffer
	if _, err := Export(bg, &dump, ExportOptions{Options: testOptions(fs), What: WhatDump}); err != nil {
		t.Fatal(err)
	}
	if got := dump.String(); !strings.Contains(got, `"block_hash":71`) || strings.Contains(got, `"block_hash":72`) || strings.Contains(got, `"block_hash":73`) {
		t.Fatalf("dump of a rank of two main groups, want block 71 only:\n%s", got)
	}
	var evs bytes.Buffer
	if _, err := Export(bg, &evs, ExportOptions{Options: testOptions(fs), What: WhatEvents}); err != nil {
		t.Fatal(err)
	}
	if got := evs.String(); strings.Count(got, `"group":{"group_idx":`) != 3 {
		t.Fatalf("events export without their groups:\n%s", got)
	}
	// compact folds the rank into a snapshot that keeps each group's blocks: the rebuilt dump
	// is the same, and a server restarted on the dir answers as before.
	if _, err := Compact(bg, &bytes.Buffer{}, CompactOptions{Options: testOptions(fs)}); err != nil {
		t.Fatal(err)
	}
	var vout bytes.Buffer
	if _, err := Verify(bg, &vout, VerifyOptions{Options: testOptions(fs)}); err != nil {
		t.Fatalf("verify after compact: %v\n%s", err, vout.String())
	}
	var after bytes.Buffer
	if _, err := Export(bg, &after, ExportOptions{Options: testOptions(fs), What: WhatDump}); err != nil {
		t.Fatal(err)
	}
	if after.String() != dump.String() {
		t.Fatalf("dump after compact:\n%s\nbefore:\n%s", after.String(), dump.String())
	}
	s = openRWWith(t, fs, lanes.Options{Lanes: 1, Logger: quiet()})
	defer s.close(t)
	if _, err := s.pipe.Submit(bg, []event.RouterEvent{g(event.Stored(r, 4, &parent, event.Block{BlockHash: 72, TokensHash: 2}), 1)}); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.pipe.RankStatus(r); len(st.Groups) != 2 {
		t.Fatalf("groups after compact and restart: %+v", st.Groups)
	}
	// Both groups hold 71 and 72 now; only group 1 holds 73.
	if sc := s.ix.FindMatches([]uint64{1, 2, 3}, false); len(sc) != 1 || sc[0].Score != 2 || sc[0].TreeSize != 2 {
		t.Fatalf("scores after compact and restart: %+v", sc)
	}
}

// TestVerifyGroupCheckpoints: online checkpoints and retention of ranks with KV-cache groups (a
// main group beside a sliding window; two main groups) write group snapshots that verify checks
// against the log they were taken from, and finds clean.
func TestVerifyGroupCheckpoints(t *testing.T) {
	fs := vfs.NewMem()
	snaps := 0
	opts := lanes.Options{Lanes: 1, Logger: quiet(), CheckpointRatio: 0.5, CheckpointMinBlocks: 1, RetainEvents: 8,
		Listener: lanes.Listener{Checkpoint: func(_ event.Rank, _ uint64, _ int, _ time.Duration, err error) {
			if err == nil {
				snaps++
			}
		}}}
	s := openRWWith(t, fs, opts)
	for w, kinds := range [][2]event.GroupKind{{event.GroupKindFullAttention, event.GroupKindSlidingWindow},
		{event.GroupKindFullAttention, event.GroupKindMLAAttention}} {
		r := event.Rank{WorkerID: uint64(w + 1)}
		id := uint64(0)
		for i := uint64(1); i <= 20; i++ {
			var parent *uint64
			if i > 1 {
				p := (i - 1) * 10
				parent = &p
			}
			for g, k := range kinds {
				id++
				ev := event.Stored(r, id, parent, event.Block{BlockHash: i * 10, TokensHash: i})
				ev.HasGroup, ev.Group = true, event.Group{Idx: uint32(g), Kind: k}
				if _, err := s.pipe.Submit(bg, []event.RouterEvent{ev}); err != nil {
					t.Fatal(err)
				}
			}
			if i%5 == 0 { // the second group drops an old block
				id++
				ev := event.Removed(r, id, (i-4)*10)
				ev.HasGroup, ev.Group = true, event.Group{Idx: 1}
				if _, err := s.pipe.Submit(bg, []event.RouterEvent{ev}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	s.close(t)
	t.Logf("%d checkpoints", snaps)
	var out bytes.Buffer
	if _, err := Verify(bg, &out, VerifyOptions{Options: testOptions(fs)}); err != nil {
		t.Fatalf("verify: %v\n%s", err, out.String())
	}
}

// TestOfflineToolsIndexTheServersKinds: a server indexing sliding-window groups too
// (--indexed-group-kinds full_attention,sliding_window) holds a window group's blocks; export,
// compact and verify given the same setting rebuild the rank as the server holds it (a compact
// with the default kinds would fold the window's blocks away, and the restarted server would
// lose them).
func TestOfflineToolsIndexTheServersKinds(t *testing.T) {
	kinds := event.GroupKinds(0).With(event.GroupKindFullAttention).With(event.GroupKindSlidingWindow)
	fs := vfs.NewMem()
	s := openRWWith(t, fs, lanes.Options{Lanes: 1, Logger: quiet(), IndexedKinds: kinds})
	r := event.Rank{WorkerID: 5}
	ev := event.Stored(r, 1, nil, event.Block{BlockHash: 81, TokensHash: 1}, event.Block{BlockHash: 82, TokensHash: 2})
	ev.HasGroup, ev.Group = true, event.Group{Idx: 0, Kind: event.GroupKindSlidingWindow, SlidingWindow: 128}
	if _, err := s.pipe.Submit(bg, []event.RouterEvent{ev}); err != nil {
		t.Fatal(err)
	}
	s.close(t)
	opts := testOptions(fs)
	opts.IndexedGroupKinds = kinds
	dump := func(o Options) string {
		var b bytes.Buffer
		if _, err := Export(bg, &b, ExportOptions{Options: o, What: WhatDump}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if got := dump(opts); !strings.Contains(got, `"block_hash":82`) {
		t.Fatalf("dump with the server's kinds, want the window's blocks:\n%s", got)
	}
	if got := dump(testOptions(fs)); strings.Contains(got, `"block_hash":81`) {
		t.Fatalf("dump with the default kinds, want no window block:\n%s", got)
	}
	if _, err := Compact(bg, &bytes.Buffer{}, CompactOptions{Options: opts}); err != nil {
		t.Fatal(err)
	}
	var vout bytes.Buffer
	if _, err := Verify(bg, &vout, VerifyOptions{Options: opts}); err != nil {
		t.Fatalf("verify after compact: %v\n%s", err, vout.String())
	}
	s = openRWWith(t, fs, lanes.Options{Lanes: 1, Logger: quiet(), IndexedKinds: kinds})
	defer s.close(t)
	if sc := s.ix.FindMatches([]uint64{1, 2}, false); len(sc) != 1 || sc[0].Score != 2 {
		t.Fatalf("scores after compact and restart: %+v", sc)
	}
}
