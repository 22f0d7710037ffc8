package workload

import (
	"errors"
	"testing"
)

// TestSplitMix64 pins the generator to SplitMix64's published reference outputs (seed 1234567):
// the stream is only SMG's if its draws are.
func TestSplitMix64(t *testing.T) {
	r := &splitMix64{s: 1234567}
	for i, want := range []uint64{6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431, 16408922859458223821} {
		if got := r.next(); got != want {
			t.Fatalf("draw %d: got %d, want %d", i, got, want)
		}
	}
}

// smgSmall is the pinned shape at 1/100 of its budget: the properties hold at any size.
func smgSmall(p SMGProfile) SMGProfile {
	p.TargetBlocks /= 100
	return p
}

// TestSMGStreamShape checks what the stream promises against the stream itself: per holder,
// every Stored extends what the holder stored before (parent = its previous batch's last block,
// within one instance), holes are interior blocks of shared prefixes removed once after the
// holder stored them, the sharing classes take their share of the budget, and Held agrees with
// the holes.
func TestSMGStreamShape(t *testing.T) {
	for _, p := range []SMGProfile{smgSmall(SMGPinned()), smgSmall(SMGFragmented())} {
		t.Run(p.Name, func(t *testing.T) {
			w, err := GenerateSMG(p)
			if err != nil {
				t.Fatal(err)
			}
			type pos struct {
				fam  int32 // -1: a tail
				at   int
				held bool
			}
			where := map[uint64]pos{} // block hash → where it lies in its family
			for fi, f := range w.Families {
				for i, b := range f.Blocks {
					where[b.BlockHash] = pos{fam: int32(fi), at: i}
				}
			}
			held := make([]map[uint64]bool, p.Holders)
			for h := range held {
				held[h] = map[uint64]bool{}
			}
			var stored, named, removed uint64
			firstHole := map[[2]uint64]int{} // (family, holder) → first hole
			for i, op := range w.Ops {
				hs := held[op.Holder]
				named += uint64(len(op.Blocks) + len(op.Keys))
				if op.Remove {
					for _, k := range op.Keys {
						at, ok := where[k]
						if !ok || !hs[k] || at.at == 0 || at.at >= len(w.Families[at.fam].Blocks)-1 {
							t.Fatalf("op %d: hole %x is not an interior block the holder holds", i, k)
						}
						delete(hs, k)
						removed++
						key := [2]uint64{uint64(at.fam), uint64(op.Holder)}
						if h, ok := firstHole[key]; !ok || at.at < h {
							firstHole[key] = at.at
						}
					}
					continue
				}
				if op.HasParent && !hs[op.Parent] {
					t.Fatalf("op %d: parent %x not stored by holder %d before", i, op.Parent, op.Holder)
				}
				if !op.HasParent && where[op.Blocks[0].BlockHash].at != 0 {
					t.Fatalf("op %d: a root batch that does not start a family", i)
				}
				for _, b := range op.Blocks {
					if !hs[b.BlockHash] {
						stored++
					}
					hs[b.BlockHash] = true
				}
			}
			if stored != w.HolderBlocks || removed != w.RemovedBlocks || named != w.StreamBlocks {
				t.Fatalf("stream counts (stored %d, removed %d, named %d) differ from the workload's (%d, %d, %d)",
					stored, removed, named, w.HolderBlocks, w.RemovedBlocks, w.StreamBlocks)
			}
			var resident uint64
			for _, hs := range held {
				resident += uint64(len(hs))
			}
			if resident != w.Resident() {
				t.Fatalf("resident %d, want %d", resident, w.Resident())
			}
			share := map[int]uint64{}
			for fi, f := range w.Families {
				share[len(f.Holders)] += uint64(len(f.Blocks) * len(f.Holders))
				for mi, h := range f.Holders {
					want := len(f.Blocks)
					if fh, ok := firstHole[[2]uint64{uint64(fi), uint64(h)}]; ok {
						want = fh
					}
					if int(f.Held[mi]) != want {
						t.Fatalf("family %d holder %d: Held %d, want %d", fi, h, f.Held[mi], want)
					}
				}
			}
			for _, sh := range p.Sharing {
				budget := p.TargetBlocks * sh.Percent / 100
				if got := share[sh.Holders]; got < budget || got > budget+uint64(p.SharedDepth[1])*uint64(sh.Holders) {
					t.Errorf("class %d: %d holder-blocks, want the budget %d plus less than one family", sh.Holders, got, budget)
				}
			}
			if p.HoleBlockPct > 0 && w.RemovedBlocks*100 < w.HolderBlocks*p.HoleBlockPct/2 {
				t.Errorf("fragmented: only %d of %d blocks removed", w.RemovedBlocks, w.HolderBlocks)
			}
			for _, c := range w.Cells {
				for _, q := range c.Queries {
					if q.Family < 0 {
						continue
					}
					f := w.Families[q.Family]
					for i, tok := range q.Contents {
						if f.Blocks[i].TokensHash != tok {
							t.Fatalf("cell %s: query is not its family's prefix", c.Name)
						}
					}
				}
			}
		})
	}
}

// TestSMGPinnedTotals pins the full-size streams: a change to the generator that changes one
// draw changes these.
func TestSMGPinnedTotals(t *testing.T) {
	if testing.Short() {
		t.Skip("generates 12.8 M holder-blocks")
	}
	for _, tc := range []struct {
		p                             SMGProfile
		families, ops                 int
		stream, holderBlocks, removed uint64
		first                         uint64
		cells                         [5]int
	}{
		{SMGPinned(), 44969, 1777433, 13498103, 12838147, 16555, 11027555026041997061, [5]int{2000, 2000, 199, 89, 1000}},
		{SMGFragmented(), 44969, 1820296, 13663778, 12826871, 196851, 11027555026041997061, [5]int{2000, 2000, 199, 89, 1000}},
	} {
		w, err := GenerateSMG(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if len(w.Families) != tc.families || len(w.Ops) != tc.ops || w.StreamBlocks != tc.stream ||
			w.HolderBlocks != tc.holderBlocks || w.RemovedBlocks != tc.removed || w.Families[0].Blocks[0].TokensHash != tc.first {
			t.Errorf("%s: families %d ops %d stream %d holder-blocks %d removed %d first %d; pinned %d %d %d %d %d %d",
				tc.p.Name, len(w.Families), len(w.Ops), w.StreamBlocks, w.HolderBlocks, w.RemovedBlocks, w.Families[0].Blocks[0].TokensHash,
				tc.families, tc.ops, tc.stream, tc.holderBlocks, tc.removed, tc.first)
		}
		for i, c := range w.Cells {
			if len(c.Queries) != tc.cells[i] {
				t.Errorf("%s: cell %s has %d queries, pinned %d", tc.p.Name, c.Name, len(c.Queries), tc.cells[i])
			}
		}
	}
}

func TestGenerateSMGRefuses(t *testing.T) {
	p := SMGPinned()
	p.Holders = 0
	if _, err := GenerateSMG(p); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("0 holders: got %v, want ErrBadOptions", err)
	}
}
