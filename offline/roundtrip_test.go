package offline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/server"
	"github.com/kvindex/kvindex/store"
)

// randomDir fills a data dir on fs with a seeded random workload of a few ranks (branching
// stores, removals, clears) through the pipeline, folding some ranks' prefixes into snapshots
// along the way as online retention would.
func randomDir(t testing.TB, fs vfs.FS, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := openRW(t, fs)
	defer s.close(t)
	next := uint64(1000)
	for w := range uint64(4) {
		r := event.Rank{WorkerID: w + 1, DPRank: uint32(w % 2)}
		var held []uint64
		id := uint64(rng.IntN(3))
		for range 40 + rng.IntN(40) {
			var ev event.RouterEvent
			switch x := rng.IntN(20); {
			case x == 0:
				ev, held = event.Cleared(r, id), nil
			case x < 5 && len(held) > 0:
				h := held[rng.IntN(len(held))]
				ev = event.Removed(r, id, h)
			default:
				var parent *uint64
				if len(held) > 0 && rng.IntN(4) > 0 {
					p := held[rng.IntN(len(held))]
					parent = &p
				}
				var blocks []event.Block
				for range 1 + rng.IntN(3) {
					next++
					blocks = append(blocks, event.Block{BlockHash: next, TokensHash: uint64(rng.IntN(6))})
					held = append(held, next)
				}
				ev = event.Stored(r, id, parent, blocks...)
			}
			if _, err := s.pipe.Submit(bg, []event.RouterEvent{ev}); err != nil {
				t.Fatal(err)
			}
			id++
			if rng.IntN(25) == 0 && id > 8 {
				var upTo uint64
				if err := s.pipe.Do(bg, r, func() {
					// Fold at the newest event, when the rank holds no stranded blocks (which a
					// snapshot cannot express: lanes keeps the log then).
					upTo = id - 1
					if err := recovery.Fold(bg, s.log, r, upTo); err != nil && !errors.Is(err, recovery.ErrNotFoldable) {
						t.Error(err)
					}
				}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestExportRoundTrip posts each export to an empty server over HTTP and checks that it scores
// every query exactly as the original dir does, and that an events export leaves the same
// cursors (unless the export shifted a rank's ids, which it reports).
func TestExportRoundTrip(t *testing.T) {
	// seed 0: a branching rank folded at id 3 into a 5-event snapshot: its ids get shifted.
	shifted := func(t *testing.T, fs vfs.FS) {
		s := openRW(t, fs)
		defer s.close(t)
		r := event.Rank{WorkerID: 1}
		p11, p12, p15 := uint64(11), uint64(12), uint64(15)
		evs := []event.RouterEvent{
			event.Stored(r, 1, nil, event.Block{BlockHash: 11, TokensHash: 101}, event.Block{BlockHash: 12, TokensHash: 102}, event.Block{BlockHash: 13, TokensHash: 103}),
			event.Stored(r, 2, &p11, event.Block{BlockHash: 14, TokensHash: 104}),
			event.Stored(r, 3, &p12, event.Block{BlockHash: 15, TokensHash: 105}),
			event.Removed(r, 4, 13),
			event.Stored(r, 5, &p15, event.Block{BlockHash: 16, TokensHash: 106}),
		}
		if _, err := s.pipe.Submit(bg, evs); err != nil {
			t.Fatal(err)
		}
		if err := s.pipe.Do(bg, r, func() {
			if err := recovery.Fold(bg, s.log, r, 3); err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	for seed := uint64(0); seed <= 4; seed++ {
		for _, what := range []What{WhatEvents, WhatDump} {
			t.Run(fmt.Sprintf("seed=%d/%v", seed, what), func(t *testing.T) {
				src := vfs.NewMem()
				if seed == 0 {
					shifted(t, src)
				} else {
					randomDir(t, src, seed)
				}
				want, cursors := rebuild(t, src)
				queries := paths(t, want)
				var out bytes.Buffer
				res, err := Export(bg, &out, ExportOptions{Options: testOptions(src), What: what})
				if err != nil {
					t.Fatal(err)
				}
				srv, err := server.Open(server.Config{DataDir: "fresh", FS: vfs.NewMem(), Lanes: 2, RetainEvents: 0, Logger: quiet()})
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				if err := srv.Recover(context.Background()); err != nil {
					t.Fatal(err)
				}
				hs := httptest.NewServer(srv.Handler())
				defer hs.Close()
				postExport(t, hs.URL, out.Bytes())
				if err := srv.Engine().Flush(bg); err != nil {
					t.Fatal(err)
				}
				if got, exp := scores(srv.Engine().Partitions().IndexOf(0), queries), scores(want, queries); got != exp {
					t.Fatalf("seed %d: scores after replaying the %v export differ:\ngot\n%s\nwant\n%s", seed, what, got, exp)
				}
				// The queries walk the original's paths only: a block the replay added (or lost)
				// off them shows in the trees, compared whole.
				if got, exp := reachable(t, srv.Engine().Partitions().IndexOf(0)), reachable(t, want); got != exp {
					t.Fatalf("seed %d: trees after replaying the %v export differ:\ngot\n%s\nwant\n%s", seed, what, got, exp)
				}
				if what != WhatEvents {
					return
				}
				if seed == 0 && (len(res.Ranks) != 1 || res.Ranks[0].Shift != 1) {
					t.Fatalf("seed 0: want one rank shifted by 1, got %+v", res.Ranks)
				}
				for _, er := range res.Ranks {
					st, ok := srv.Engine().RankStatus(er.Rank)
					c, had := cursors[er.Rank]
					if !ok || !had {
						t.Fatalf("rank %v: replayed %v, original cursor %v", er.Rank, ok, had)
					}
					if want := c.LastEventID + er.Shift; st.Last != want {
						t.Errorf("rank %v: cursor %d after replay, want %d (shift %d)", er.Rank, st.Last, want, er.Shift)
					}
				}
			})
		}
	}
}

// postExport posts an export to a server the documented way: the NDJSON as it is, its
// partition lines included (the server reads them: docs/API.md "Partition lines").
func postExport(t testing.TB, base string, export []byte) {
	t.Helper()
	resp, err := http.Post(base+"/v1/events", "application/x-ndjson", bytes.NewReader(export))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/events: %s %s", resp.Status, b)
	}
}

// TestReadOnlyCommandsNeverWrite runs the read-only commands on a dir with a corrupt snapshot
// and checks that the dir's keys are unchanged (the server, not export, drops the snapshot).
func TestReadOnlyCommandsNeverWrite(t *testing.T) {
	fs := vfs.NewMem()
	randomDir(t, fs, 7)
	snap := firstKey(t, fs, store.PrefixSnapshot)
	if snap == nil {
		t.Fatal("seed 7 folded no rank: no snapshot to corrupt")
	}
	if got := corrupt(t, fs, snap); !strings.HasPrefix(got, "flipped") {
		t.Fatalf("corrupting the snapshot: %s", got)
	}
	before := dirKeys(t, fs)
	var sink bytes.Buffer
	if _, err := Inspect(bg, &sink, InspectOptions{Options: testOptions(fs)}); err != nil {
		t.Fatal(err)
	}
	// The precondition: verify sees the corruption.
	if _, err := Verify(bg, &sink, VerifyOptions{Options: testOptions(fs)}); !errors.Is(err, ErrProblems) {
		t.Fatalf("verify on a corrupt snapshot: %v, want ErrProblems\n%s", err, sink.String())
	}
	for _, w := range []What{WhatEvents, WhatDump} {
		_, _ = Export(bg, &sink, ExportOptions{Options: testOptions(fs), What: w}) // may refuse: it must not write
	}
	if after := dirKeys(t, fs); after != before {
		t.Fatalf("read-only commands changed the dir:\nbefore %s\nafter %s", before, after)
	}
}

// dirKeys lists every key and value of the dir as text.
func dirKeys(t testing.TB, fs vfs.FS) string {
	st, err := store.Open(testDir, store.Options{FS: fs, Logger: quiet(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	it, err := st.DB().NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for valid := it.First(); valid; valid = it.Next() {
		fmt.Fprintf(&b, "%x=%x\n", it.Key(), it.Value())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// firstKey returns the dir's first key with the prefix (nil when none).
func firstKey(t testing.TB, fs vfs.FS, prefix byte) []byte {
	st, err := store.Open(testDir, store.Options{FS: fs, Logger: quiet(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	it, err := st.DB().NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if !it.First() {
		return nil
	}
	return bytes.Clone(it.Key())
}

// reachable renders each rank's tree as its dump carries it (blocks reachable from the root,
// with parents and tokens hashes; ids left out, which an export may shift), ranks without blocks
// left out.
func reachable(t testing.TB, ix *index.Index) string {
	t.Helper()
	var ranks []string
	for _, ri := range ix.Ranks() {
		var edges []string
		err := ix.DumpRank(ri.Rank, func(ev *event.RouterEvent) error {
			parent := "root"
			if ev.HasParent {
				parent = fmt.Sprint(ev.ParentHash)
			}
			for _, b := range ev.Blocks {
				edges = append(edges, fmt.Sprintf("%s>%d(%d)", parent, b.BlockHash, b.TokensHash))
				parent = fmt.Sprint(b.BlockHash)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(edges) > 0 {
			sort.Strings(edges)
			ranks = append(ranks, fmt.Sprintf("%v: %s", ri.Rank, strings.Join(edges, " ")))
		}
	}
	sort.Strings(ranks)
	return strings.Join(ranks, "\n")
}
