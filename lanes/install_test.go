package lanes

import (
	"context"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/recovery"
)

// Install replaces a rank's state (its tree, buffered events, degraded flag) with a dump at a
// cursor, durably and with its metadata in the same batch: the worker's next id applies on top
// of it, and a crash right after brings back the installed state and the metadata.
func TestInstallReplacesTheRankAtTheCursorDurably(t *testing.T) {
	g := newLifecycleRig(t)
	defer func() { g.close() }()
	ctx := context.Background()
	rk := event.Rank{WorkerID: 7}
	// A rank with a gap (no source): degraded, holding blocks the dump does not have.
	if _, err := g.p.Submit(ctx, []event.RouterEvent{
		event.Stored(rk, 1, nil, event.Block{BlockHash: 900, TokensHash: 90}),
		event.Stored(rk, 5, nil, event.Block{BlockHash: 901, TokensHash: 91}),
	}); err != nil {
		t.Fatal(err)
	}
	if st, _ := g.p.RankStatus(rk); !st.Degraded {
		t.Fatalf("setup: %+v", st)
	}
	if c := g.p.StateCounts()[rk.Partition]; c == nil || c[recovery.StateDegraded] != 1 || c[recovery.StateLive] != 0 {
		t.Fatalf("StateCounts of the degraded rank's partition: %v, want one degraded", c)
	}
	parent := uint64(1)
	dump := []event.RouterEvent{
		event.Stored(rk, 0, nil, event.Block{BlockHash: 1, TokensHash: 11}),
		event.Stored(rk, 1, &parent, event.Block{BlockHash: 2, TokensHash: 12}),
	}
	if err := g.p.Install(ctx, rk, dump, 40, Meta{Name: "test/pos", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	check := func(when string, wantBlocks uint64, wantLast uint64) {
		t.Helper()
		st, ok := g.p.RankStatus(rk)
		if !ok || st.Last != wantLast || st.Degraded || st.Pending != 0 {
			t.Fatalf("%s: %+v", when, st)
		}
		if n := g.ix.RankBlocks(rk); n != wantBlocks {
			t.Fatalf("%s: %d blocks, want %d", when, n, wantBlocks)
		}
		if v, ok, err := g.log.Meta("test/pos"); err != nil || !ok || string(v) != "x" {
			t.Fatalf("%s: meta %q %v %v", when, v, ok, err)
		}
	}
	check("installed", 2, 40)
	two := uint64(2)
	if res, err := g.p.Submit(ctx, []event.RouterEvent{event.Stored(rk, 41, &two, event.Block{BlockHash: 3, TokensHash: 13})}); err != nil || res.Accepted != 1 {
		t.Fatalf("next id: %+v %v", res, err)
	}
	check("next id applied", 3, 41)
	g.crash()
	check("after a crash", 3, 41)
}
