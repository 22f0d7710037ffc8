package offline

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/lanes"
)

// TestExportDumpOfSeveralMainGroups: `kvindex export --what dump` rebuilds a rank through the
// lanes' KV-cache group gate, so a rank of two main groups dumps the blocks both hold (what the
// server answers with), not the union of its groups; `--what events` keeps every group.
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
}
