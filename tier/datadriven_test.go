package tier_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/testutil"
	"github.com/kvindex/kvindex/tier"
)

// TestDataDriven runs the tier scripts in testdata/ (docs/CONTRACT.md §7). Commands:
//
//	store rank=W/D [tier=T] [parent=H|-] blocks=(H:T,...)   a Stored (block hash : tokens hash)
//	remove rank=W/D [tier=T] hashes=(H,...)                 a Removed
//	clear rank=W/D [tier=T]                                 a Cleared (every tier, whatever T)
//	remove-rank rank=W/D
//	find-matches hashes=(T,...) [early-exit] [device-only]  the tiered answer
//	dump [rank=W/D]                                         DumpRank, every rank by default
//	replay                                                  rebuild a fresh Tiers from the dumps
//	tiers                                                   per rank blocks by tier; edges, conflicts
//
// Every event also goes to the reference model; every find-matches checks the device scores
// against the model's bounds and the extensions against the model's walk.
func TestDataDriven(t *testing.T) {
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
	ts := tier.New(nil)
	m := testutil.NewModel()
	ids := map[event.Rank]uint64{}
	datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
		apply := func(ev event.RouterEvent) string {
			ids[ev.Rank()]++
			ev.EventID = ids[ev.Rank()]
			if a, ok := td.Arg("tier"); ok {
				tr, ok := event.ParseTier(a.SingleVal(t))
				if !ok {
					td.Fatalf(t, "tier %q", a.SingleVal(t))
				}
				ev.Tier = tr
			}
			res := ts.Apply(&ev)
			want := m.Apply(&ev)
			if res.Status.String() != want.Status || res.NotFound != want.NotFound || res.Blocks != want.Blocks {
				t.Fatalf("%s: tiers %+v, model %+v", td.Pos, res, want)
			}
			s := fmt.Sprintf("%s blocks=%d", res.Status, res.Blocks)
			if res.NotFound > 0 {
				s += fmt.Sprintf(" not_found=%d", res.NotFound)
			}
			return s + "\n"
		}
		switch td.Cmd {
		case "store":
			r := rankArg(t, td)
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
		case "remove":
			var hs []uint64
			if a, ok := td.Arg("hashes"); ok {
				for _, v := range a.Vals {
					hs = append(hs, parseU64(t, v))
				}
			}
			return apply(event.Removed(rankArg(t, td), 0, hs...))
		case "clear":
			return apply(event.Cleared(rankArg(t, td), 0))
		case "remove-rank":
			r := rankArg(t, td)
			m.RemoveRank(r)
			return fmt.Sprintf("known=%v\n", ts.RemoveRank(r))
		case "find-matches":
			var q []uint64
			if a, ok := td.Arg("hashes"); ok {
				for _, v := range a.Vals {
					q = append(q, parseU64(t, v))
				}
			}
			early, devOnly := td.HasArg("early-exit"), td.HasArg("device-only")
			got := ts.FindMatchesInto(nil, q, early, devOnly)
			if !devOnly {
				checkTiered(t, ts, m, q, early, got)
			}
			if len(got) == 0 {
				return "no matches\n"
			}
			var b strings.Builder
			for _, s := range got {
				b.WriteString(fmtScore(s) + "\n")
			}
			return b.String()
		case "dump":
			var ranks []event.Rank
			if td.HasArg("rank") {
				ranks = append(ranks, rankArg(t, td))
			} else {
				ranks = ts.Ranks()
			}
			var b strings.Builder
			for _, r := range ranks {
				if err := ts.DumpRank(r, func(ev *event.RouterEvent) error {
					b.WriteString(testutil.FormatEvent(ev) + "\n")
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			if b.Len() == 0 {
				return "empty\n"
			}
			return b.String()
		case "replay":
			fresh := tier.New(nil)
			n := 0
			for _, r := range ts.Ranks() {
				evs := dumpOf(t, ts, r)
				n += len(evs)
				fresh.ReplaceRank(r, evs)
			}
			ts = fresh
			return fmt.Sprintf("replayed %d events\n", n)
		case "tiers":
			var b strings.Builder
			for _, r := range ts.Ranks() {
				tb := ts.TierBlocks(r)
				fmt.Fprintf(&b, "%s device=%d host_pinned=%d disk=%d external=%d\n", r, tb[0], tb[1], tb[2], tb[3])
			}
			for _, tr := range tier.Lower {
				lx := ts.Lower(tr)
				fmt.Fprintf(&b, "%s: edges=%d blocks=%d conflicts=%d\n", tr, lx.Edges(), lx.Blocks(), lx.Conflicts())
			}
			return b.String()
		}
		td.Fatalf(t, "unknown command %q", td.Cmd)
		return ""
	})
}

func fmtScore(s tier.Score) string {
	out := fmt.Sprintf("%d/%d score=%d tree_size=%d", s.WorkerID, s.DPRank, s.Score.Score, s.TreeSize)
	for i, tr := range tier.Lower {
		if s.Ext[i] > 0 {
			out += fmt.Sprintf(" %s=%d", tr, s.Ext[i])
		}
	}
	return out
}

// checkTiered checks a tiered answer against the model: the device part as index's checks do
// (bounds), the extensions equal to the model's walk from the same device path.
func checkTiered(t tb, ts *tier.Tiers, m *testutil.Model, q []uint64, early bool, got []tier.Score) {
	t.Helper()
	dev, path := ts.Device.FindMatchesPath(nil, nil, q, early)
	device := map[event.Rank]int{}
	for _, d := range dev {
		device[event.Rank{WorkerID: d.WorkerID, DPRank: d.DPRank}] = int(d.Score)
		if !early {
			r := event.Rank{WorkerID: d.WorkerID, DPRank: d.DPRank}
			if lo, hi := m.ReachablePrefix(r, q), m.HeldPrefix(r, q); int(d.Score) < lo || int(d.Score) > hi {
				t.Fatalf("query %v: rank %v device score %d outside [%d, %d]", q, r, d.Score, lo, hi)
			}
		}
	}
	want := m.Extensions(q, device, func(d int) uint64 {
		// The anchor of the tier walk after d device blocks, from the model's own blocks (the
		// block its ranks hold at q[:d]), checked against the implementation's walk.
		h, ok := modelAnchor(m, q[:d])
		if !ok {
			t.Fatalf("query %v: no rank of the model holds a device block at %v (a score of %d)", q, q[:d], d)
		}
		if path[d-1] != h {
			t.Fatalf("query %v: the device walk's block at %d is %d, the model's %d", q, d, path[d-1], h)
		}
		return h
	})
	seen := map[event.Rank]bool{}
	for i, s := range got {
		r := event.Rank{WorkerID: s.WorkerID, DPRank: s.DPRank}
		seen[r] = true
		if i < len(dev) && (dev[i].Rank() != r || dev[i].Score != s.Score.Score) {
			t.Fatalf("query %v: answer %d is %v, device answer %v", q, i, s, dev[i])
		}
		if i >= len(dev) && (s.Score.Score != 0 || !s.HasExt()) {
			t.Fatalf("query %v: rank %v listed after the device answer with %v", q, r, s)
		}
		w := want[r]
		if [3]int{int(s.Ext[0]), int(s.Ext[1]), int(s.Ext[2])} != w {
			t.Fatalf("query %v: rank %v extensions %v, model %v", q, r, s.Ext, w)
		}
	}
	for r, w := range want {
		if !seen[r] {
			t.Fatalf("query %v: rank %v missing, model extends it by %v", q, r, w)
		}
	}
}

func dumpOf(t tb, ts *tier.Tiers, r event.Rank) []event.RouterEvent {
	t.Helper()
	var evs []event.RouterEvent
	if err := ts.DumpRank(r, func(ev *event.RouterEvent) error {
		evs = append(evs, ev.Clone())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

func rankArg(t *testing.T, td *datadriven.TestData) event.Rank {
	a, ok := td.Arg("rank")
	if !ok {
		td.Fatalf(t, "missing rank=")
	}
	r, err := testutil.ParseRank(a.SingleVal(t))
	if err != nil {
		td.Fatalf(t, "rank: %v", err)
	}
	return r
}

func parseU64(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// tb is what the checks need of *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// modelAnchor is the block hash the model's ranks hold at the device path prefix (false when none
// does). Ranks that hold different hashes there would make the anchor ambiguous: the first found
// in rank order wins, which the implementation's walk is then checked against.
func modelAnchor(m *testutil.Model, prefix []uint64) (uint64, bool) {
	for _, r := range m.Ranks() {
		for _, h := range m.HeldBlocks(r) {
			if b, ok := m.Block(r, h); ok && slices.Equal(b.Path, prefix) {
				return h, true
			}
		}
	}
	return 0, false
}
