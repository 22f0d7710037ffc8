package tier_test

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/testutil"
	"github.com/kvindex/kvindex/tier"
	"pgregory.net/rapid"
)

// TestPropertyMixedTiersAgainstModel drives Tiers, a device-only index and the reference model
// with one random stream of device and lower-tier events (2 workers × 2 dp ranks, small hash
// alphabets, so shared edges, conflicts and mid-chain removals are common). It checks the rules
// of docs/CONTRACT.md §7 after every step:
//   - device scores are unchanged by lower-tier events: the tiered answer's device part equals
//     the answer of an index fed the device events and the Cleareds only;
//   - tier extensions equal the model's walk from the same device path, and the ranks listed
//     after the device answer are exactly those the lower tiers alone extend;
//   - per-tier block counts equal the model's;
//
// and at the end, when no store conflicted, that every rank's dump replayed into a fresh Tiers
// gives the same answers.
func TestPropertyMixedTiersAgainstModel(t *testing.T) {
	defer func() { t.Logf("replay checks %d", replayChecks.Load()) }()
	rapid.Check(t, func(rt *rapid.T) {
		ts := tier.New(nil)
		dev := index.New(index.Options{})
		m := testutil.NewModel()
		rankGen := rapid.Custom(func(t *rapid.T) event.Rank {
			return event.Rank{WorkerID: rapid.Uint64Range(1, 2).Draw(t, "worker"), DPRank: rapid.Uint32Range(0, 1).Draw(t, "dp")}
		})
		blockHash := rapid.Uint64Range(1, 10)
		tokens := rapid.Uint64Range(100, 102)
		tierGen := rapid.SampledFrom([]event.Tier{event.TierDevice, event.TierDevice, event.TierHostPinned, event.TierHostPinned, event.TierDisk, event.TierExternal})
		var queries [][]uint64
		for step := 0; step < 80; step++ {
			r := rankGen.Draw(rt, "rank")
			tr := tierGen.Draw(rt, "tier")
			var ev event.RouterEvent
			switch op := rapid.IntRange(0, 19).Draw(rt, "op"); {
			case op < 12:
				// Device blocks are named by their position (as engines that hash blocks as a
				// chain do): ranks at one position agree on its block hash, which anchors the
				// tier walk. Lower-tier blocks are named by their edge (parent, tokens), but one
				// in sixteen takes a small random hash: conflicts happen, not in every run.
				n := rapid.IntRange(0, 4).Draw(rt, "n")
				var parent *uint64
				var path []uint64
				switch k := rapid.IntRange(0, 3).Draw(rt, "parent"); {
				case k == 1 && len(m.HeldBlocks(r)) > 0:
					p := rapid.SampledFrom(m.HeldBlocks(r)).Draw(rt, "held device parent")
					b, _ := m.Block(r, p)
					parent, path = &p, b.Path
				case k == 2 && tr != event.TierDevice && len(m.TierEdges(r, tr)) > 0:
					var held []uint64
					for h := range m.TierEdges(r, tr) {
						held = append(held, h)
					}
					slices.Sort(held)
					p := rapid.SampledFrom(held).Draw(rt, "held tier parent")
					parent = &p
				case k >= 2:
					p := blockHash.Draw(rt, "random parent")
					parent = &p
				}
				blocks := make([]event.Block, n)
				for i := range blocks {
					tok := tokens.Draw(rt, "th")
					path = append(path[:len(path):len(path)], tok)
					var h uint64
					switch {
					case tr == event.TierDevice:
						h = pathHash(path)
					case rapid.IntRange(0, 15).Draw(rt, "random hash") == 0:
						h = blockHash.Draw(rt, "bh")
					case i > 0:
						h = pathHash([]uint64{blocks[i-1].BlockHash, tok})
					case parent != nil:
						h = pathHash([]uint64{*parent, tok})
					default:
						h = pathHash([]uint64{0, tok, 0})
					}
					blocks[i] = event.Block{BlockHash: h, TokensHash: tok}
				}
				ev = event.Stored(r, 0, parent, blocks...)
			case op < 17:
				hs := rapid.SliceOfN(blockHash, 0, 3).Draw(rt, "removed")
				held := m.HeldBlocks(r)
				if tr != event.TierDevice {
					held = held[:0]
					for h := range m.TierEdges(r, tr) {
						held = append(held, h)
					}
					slices.Sort(held)
				}
				if len(held) > 0 {
					hs = append(hs, rapid.SliceOfN(rapid.SampledFrom(held), 0, 2).Draw(rt, "held")...)
				}
				ev = event.Removed(r, 0, hs...)
			case op < 18:
				ev = event.Cleared(r, 0)
			default:
				lower := m.TierBlocks(r, 1)+m.TierBlocks(r, 2)+m.TierBlocks(r, 3) > 0
				if got, want := ts.RemoveRank(r), m.RemoveRank(r) || lower; want && !got {
					rt.Fatalf("RemoveRank(%v) = false, the model knew it", r)
				}
				dev.RemoveRank(r)
			}
			if ev.Kind != 0 {
				ev.Tier = tr
				res, want := ts.Apply(&ev), m.Apply(&ev)
				if res.Status.String() != want.Status || res.Blocks != want.Blocks || res.NotFound != want.NotFound {
					rt.Fatalf("step %d %s: tiers %+v, model %+v", step, testutil.FormatEvent(&ev), res, want)
				}
				if ev.Tier == event.TierDevice || ev.Kind == event.KindCleared {
					dev.Apply(&ev)
				}
			}
			for _, rk := range m.TierRanks() {
				tb := ts.TierBlocks(rk)
				for _, lt := range tier.Lower {
					if int(tb[lt]) != m.TierBlocks(rk, lt) {
						rt.Fatalf("step %d: rank %v holds %d %s blocks, model %d", step, rk, tb[lt], lt, m.TierBlocks(rk, lt))
					}
				}
			}
			q := rapid.SliceOfN(tokens, 0, 6).Draw(rt, "query")
			queries = append(queries, q)
			for _, early := range []bool{false, true} {
				got := ts.FindMatchesInto(nil, q, early, false)
				checkTiered(rt, ts, m, q, early, got)
				want := dev.FindMatches(q, early)
				for i := range want {
					if i >= len(got) || got[i].Score.Score != want[i].Score || got[i].Rank() != want[i].Rank() {
						rt.Fatalf("query %v: device part %v, device-only index %v", q, got, want)
					}
				}
			}
		}
		// Dump and replay every rank into a fresh Tiers: the same answers. Only without conflicts:
		// a conflict between ranks is resolved by arrival, and a replay goes rank by rank.
		for _, tr := range tier.Lower {
			if ts.Lower(tr).Conflicts() > 0 {
				return
			}
		}
		replayChecks.Add(1)
		fresh := tier.New(nil)
		for _, r := range ts.Ranks() {
			fresh.ReplaceRank(r, dumpOf(rt, ts, r))
		}
		for _, q := range queries {
			a, b := ts.FindMatchesInto(nil, q, false, false), fresh.FindMatchesInto(nil, q, false, false)
			if len(a) != len(b) {
				rt.Fatalf("query %v: %v before the replay, %v after", q, a, b)
			}
			for i := range a {
				if a[i].Rank() != b[i].Rank() || a[i].Score.Score != b[i].Score.Score || a[i].Ext != b[i].Ext {
					rt.Fatalf("query %v: %v before the replay, %v after", q, a, b)
				}
			}
		}
	})
}

// pathHash names a device position: its tokens hashes from the root (never a small hash).
func pathHash(path []uint64) uint64 {
	h := uint64(1469598103934665603)
	for _, t := range path {
		h = (h ^ t) * 1099511628211
	}
	return h | 1<<63
}

var replayChecks atomic.Int64
