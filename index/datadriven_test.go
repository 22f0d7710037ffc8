package index_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/testutil"
)

// TestDataDriven runs the conformance scripts in testdata/. Commands:
//
//	store rank=W/D [parent=H|-] blocks=(H:T,...)   a Stored event (block hash : tokens hash)
//	store-seq rank=W/D n=N tokens=T [diverge-at=K tokens-after=U]
//	    a Stored of N blocks from the root with tokens hashes T, T+1, … (from block K on:
//	    U+K, U+K+1, …) and their chained sequence hashes as block hashes
//	remove rank=W/D hashes=(H,...)       a Removed event
//	clear rank=W/D                       a Cleared event
//	remove-rank rank=W/D | remove-worker worker=W
//	find-matches hashes=(T,...) [early-exit]
//	find-matches-seq n=N tokens=T [diverge-at=K tokens-after=U] [early-exit]
//	dump [rank=W/D]                      the Stored events of DumpRank, every rank by default
//	replay                               rebuild the index from its dump (fresh index, ReplaceRank)
//	counts | nodes | ranks
//
// Every applied event also goes to the reference model, and every find-matches checks each score
// against the model's bounds (reachable prefix ≤ score ≤ held prefix, tree size = held blocks).
func TestDataDriven(t *testing.T) {
	// Only the scripts directly in testdata/ (rapid keeps its failure files in testdata/rapid/).
	paths, err := filepath.Glob("testdata/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		if fi, err := os.Stat(path); err != nil || fi.IsDir() {
			continue
		}
		t.Run(filepath.Base(path), func(t *testing.T) { runScript(t, path) })
	}
}

func runScript(t *testing.T, path string) {
	ix := index.New(index.Options{})
	m := testutil.NewModel()
	ids := map[event.Rank]uint64{}
	replayed := false
	datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
		apply := func(ev event.RouterEvent) string {
			ids[ev.Rank()]++
			ev.EventID = ids[ev.Rank()]
			res := ix.Apply(&ev)
			want := m.Apply(&ev)
			if res.Status.String() != want.Status || res.NotFound != want.NotFound {
				t.Fatalf("%s: index %+v, model %+v", td.Pos, res, want)
			}
			return fmtResult(res)
		}
		switch td.Cmd {
		case "store":
			r := rankArg(t, td, "rank")
			var parent *uint64
			if a, ok := td.Arg("parent"); ok && a.SingleVal(t) != "-" {
				h := parseU64(t, a.SingleVal(t))
				parent = &h
			}
			var blocks []event.Block
			if a, ok := td.Arg("blocks"); ok {
				for _, v := range a.Vals {
					bh, th, ok := strings.Cut(v, ":")
					if !ok {
						td.Fatalf(t, "block %q: want blockhash:tokenshash", v)
					}
					blocks = append(blocks, event.Block{BlockHash: parseU64(t, bh), TokensHash: parseU64(t, th)})
				}
			}
			return apply(event.Stored(r, 0, parent, blocks...))
		case "store-seq":
			r := rankArg(t, td, "rank")
			toks := seqTokens(t, td)
			seq := event.SequenceHashes(toks)
			blocks := make([]event.Block, len(toks))
			for i := range toks {
				blocks[i] = event.Block{BlockHash: seq[i], TokensHash: toks[i]}
			}
			return apply(event.Stored(r, 0, nil, blocks...))
		case "remove":
			r := rankArg(t, td, "rank")
			var hs []uint64
			if a, ok := td.Arg("hashes"); ok {
				for _, v := range a.Vals {
					hs = append(hs, parseU64(t, v))
				}
			}
			return apply(event.Removed(r, 0, hs...))
		case "clear":
			return apply(event.Cleared(rankArg(t, td, "rank"), 0))
		case "remove-rank":
			r := rankArg(t, td, "rank")
			got, want := ix.RemoveRank(r), m.RemoveRank(r)
			if got != want {
				t.Fatalf("%s: RemoveRank %v, model %v", td.Pos, got, want)
			}
			return fmt.Sprintf("known=%v\n", got)
		case "remove-worker":
			var w uint64
			td.ScanArgs(t, "worker", &w)
			got, want := ix.RemoveWorker(w), m.RemoveWorker(w)
			if got != want {
				t.Fatalf("%s: RemoveWorker %d, model %d", td.Pos, got, want)
			}
			return fmt.Sprintf("ranks removed=%d\n", got)
		case "find-matches", "find-matches-seq":
			var q []uint64
			if td.Cmd == "find-matches-seq" {
				q = seqTokens(t, td)
			} else if a, ok := td.Arg("hashes"); ok {
				for _, v := range a.Vals {
					q = append(q, parseU64(t, v))
				}
			}
			early := td.HasArg("early-exit")
			scores := ix.FindMatches(q, early)
			if !replayed {
				checkScores(t, m, q, early, scores)
			}
			if len(scores) == 0 {
				return "no matches\n"
			}
			var b strings.Builder
			for _, s := range scores {
				fmt.Fprintf(&b, "%d/%d score=%d tree_size=%d\n", s.WorkerID, s.DPRank, s.Score, s.TreeSize)
			}
			return b.String()
		case "dump":
			ranks := []event.Rank{}
			if td.HasArg("rank") {
				ranks = append(ranks, rankArg(t, td, "rank"))
			} else {
				for _, ri := range ix.Ranks() {
					ranks = append(ranks, ri.Rank)
				}
			}
			var b strings.Builder
			for _, r := range ranks {
				err := ix.DumpRank(r, func(ev *event.RouterEvent) error {
					b.WriteString(fmtStored(ev))
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if b.Len() == 0 {
				return "empty\n"
			}
			return b.String()
		case "replay":
			fresh := index.New(index.Options{})
			n := 0
			for _, ri := range ix.Ranks() {
				evs := dumpRank(t, ix, ri.Rank)
				n += len(evs)
				fresh.ReplaceRank(ri.Rank, evs)
			}
			ix = fresh
			replayed = true // the model keeps stranded blocks the dump leaves out
			return fmt.Sprintf("replayed %d events; nodes=%d blocks=%d\n", n, ix.NodeCount(), ix.Blocks())
		case "counts":
			c := ix.Counts()
			var b strings.Builder
			for _, k := range []event.Kind{event.KindStored, event.KindRemoved, event.KindCleared} {
				for s := index.StatusOK; s <= index.StatusInvalidBlock; s++ {
					if n := c.Get(k, s); n > 0 {
						fmt.Fprintf(&b, "%s %s: %d\n", k, s, n)
					}
				}
			}
			if b.Len() == 0 {
				return "none\n"
			}
			return b.String()
		case "nodes":
			return fmt.Sprintf("nodes=%d blocks=%d\n", ix.NodeCount(), ix.Blocks())
		case "ranks":
			var b strings.Builder
			for _, ri := range ix.Ranks() {
				fmt.Fprintf(&b, "%s blocks=%d\n", ri.Rank, ri.Blocks)
			}
			if b.Len() == 0 {
				return "none\n"
			}
			return b.String()
		}
		td.Fatalf(t, "unknown command %q", td.Cmd)
		return ""
	})
}

func fmtResult(r index.Result) string {
	s := fmt.Sprintf("%s blocks=%d", r.Status, r.Blocks)
	if r.NotFound > 0 {
		s += fmt.Sprintf(" not_found=%d", r.NotFound)
	}
	return s + "\n"
}

func fmtStored(ev *event.RouterEvent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d #%d parent=", ev.WorkerID, ev.DPRank, ev.EventID)
	if ev.HasParent {
		fmt.Fprintf(&b, "%d", ev.ParentHash)
	} else {
		b.WriteString("-")
	}
	b.WriteString(" blocks=(")
	for i, bl := range ev.Blocks {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%d:%d", bl.BlockHash, bl.TokensHash)
	}
	b.WriteString(")\n")
	return b.String()
}

func rankArg(t *testing.T, td *datadriven.TestData, key string) event.Rank {
	a, ok := td.Arg(key)
	if !ok {
		td.Fatalf(t, "missing %s=", key)
	}
	w, d, ok := strings.Cut(a.SingleVal(t), "/")
	if !ok {
		td.Fatalf(t, "%s: want worker/dp", key)
	}
	dp, err := strconv.ParseUint(d, 10, 32)
	if err != nil {
		td.Fatalf(t, "%s: %v", key, err)
	}
	return event.Rank{WorkerID: parseU64(t, w), DPRank: uint32(dp)}
}

func parseU64(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func seqTokens(t *testing.T, td *datadriven.TestData) []uint64 {
	var n int
	var base uint64
	td.ScanArgs(t, "n", &n)
	td.ScanArgs(t, "tokens", &base)
	div, after := n, uint64(0)
	td.MaybeScanArgs(t, "diverge-at", &div)
	td.MaybeScanArgs(t, "tokens-after", &after)
	toks := make([]uint64, n)
	for i := range toks {
		if i < div {
			toks[i] = base + uint64(i)
		} else {
			toks[i] = after + uint64(i)
		}
	}
	return toks
}

// dumpRank returns a rank's dump as owned events.
func dumpRank(t tb, ix *index.Index, r event.Rank) []event.RouterEvent {
	t.Helper()
	var evs []event.RouterEvent
	if err := ix.DumpRank(r, func(ev *event.RouterEvent) error {
		evs = append(evs, ev.Clone())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}
