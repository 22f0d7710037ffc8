package engine

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

var (
	kindsFA  = event.GroupKinds(0).With(event.GroupKindFullAttention)
	kindsSWA = kindsFA.With(event.GroupKindSlidingWindow)
	gemma    = partition.KeyOf("gemma", "", "")
)

func openKindsEngine(t *testing.T, fs vfs.FS, server event.GroupKinds, parts map[partition.Key]event.GroupKinds) *Engine {
	t.Helper()
	e, err := Open(Config{DataDir: "data", FS: fs, Lanes: 2, IndexedGroupKinds: server, PartitionGroupKinds: parts,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Recover(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestIndexedGroupKindsResolution: a source's setting wins over its partition's, which wins over
// the server's; unset everywhere, the main attention kinds.
func TestIndexedGroupKindsResolution(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		server, part, source event.GroupKinds
		inGemma              bool
		want                 event.GroupKinds
	}{
		{name: "defaults", want: event.MainGroupKinds},
		{name: "server", server: kindsSWA, want: kindsSWA},
		{name: "partition over server", server: kindsFA, part: kindsSWA, inGemma: true, want: kindsSWA},
		{name: "another partition's setting", server: kindsFA, part: kindsSWA, want: kindsFA},
		{name: "source over partition", part: kindsSWA, source: kindsFA, inGemma: true, want: kindsFA},
		{name: "source over server", server: kindsSWA, source: kindsFA, want: kindsFA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := map[partition.Key]event.GroupKinds{}
			if tc.part != 0 {
				parts[gemma] = tc.part
			}
			e := openKindsEngine(t, vfs.NewMem(), tc.server, parts)
			defer e.Close()
			key := partition.Default
			if tc.inGemma {
				key = gemma
			}
			id, err := e.Place(context.Background(), Placement{Key: key, Worker: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.setSourceKinds(context.Background(), 1, tc.source); err != nil {
				t.Fatal(err)
			}
			if got := e.IndexedGroupKinds(event.Rank{Partition: id, WorkerID: 1}); got != tc.want {
				t.Fatalf("kinds %v, want %v", got.Names(), tc.want.Names())
			}
		})
	}
}

// TestSourceGroupKindsRegroupAndRestart: in partition gemma (its window group indexed), a
// source's setting for its worker rebuilds the worker's ranks at once, is kept across a
// restart, and cleared gives the partition's setting back.
func TestSourceGroupKindsRegroupAndRestart(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	parts := map[partition.Key]event.GroupKinds{gemma: kindsSWA}
	e := openKindsEngine(t, fs, 0, parts)
	grouped := func(ev event.RouterEvent, idx uint32, kind event.GroupKind) event.RouterEvent {
		ev.HasGroup, ev.Group = true, event.Group{Idx: idx, Kind: kind, BlockSize: 16}
		return ev
	}
	rk := event.Rank{WorkerID: 1}
	chain := func(id uint64) event.RouterEvent { // blocks 100, 200, 300 of tokens 10, 20, 30
		return event.Stored(rk, id, nil, event.Block{BlockHash: 100, TokensHash: 10}, event.Block{BlockHash: 200, TokensHash: 20},
			event.Block{BlockHash: 300, TokensHash: 30})
	}
	if _, err := e.Ingest(ctx, gemma, []event.RouterEvent{
		grouped(chain(1), 0, event.GroupKindFullAttention),
		grouped(chain(2), 1, event.GroupKindSlidingWindow),
		grouped(event.Removed(rk, 3, 300), 1, event.GroupKindSlidingWindow),
	}); err != nil {
		t.Fatal(err)
	}
	score := func(e *Engine) uint32 {
		for _, s := range e.Find(nil, gemma, Query{Hashes: []uint64{10, 20, 30}}) {
			if s.WorkerID == 1 {
				return s.Score
			}
		}
		return 0
	}
	steps := []struct {
		what    string
		do      func() error
		restart bool
		want    uint32
	}{
		{what: "the partition indexes the window group", want: 2},
		{what: "the source names full_attention alone", do: func() error { return e.setSourceKinds(ctx, 1, kindsFA) }, want: 3},
		{what: "the same setting again", do: func() error { return e.setSourceKinds(ctx, 1, kindsFA) }, want: 3},
		{what: "restart: the source's setting was kept", restart: true, want: 3},
		{what: "the source's setting cleared", do: func() error { return e.setSourceKinds(ctx, 1, 0) }, want: 2},
		{what: "restart", restart: true, want: 2},
	}
	for _, st := range steps {
		if st.do != nil {
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.what, err)
			}
		}
		if st.restart {
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = openKindsEngine(t, fs, 0, parts)
		}
		if got := score(e); got != st.want {
			t.Fatalf("%s: score %d, want %d", st.what, got, st.want)
		}
	}
	// A removed worker's source setting goes with it.
	if err := e.setSourceKinds(ctx, 1, kindsFA); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Remove(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openKindsEngine(t, fs, 0, parts)
	defer e.Close()
	id, err := e.Place(ctx, Placement{Key: gemma, Worker: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.IndexedGroupKinds(event.Rank{Partition: id, WorkerID: 1}); got != kindsSWA {
		t.Fatalf("after the worker's removal and a restart: kinds %v, want the partition's", got.Names())
	}
}
