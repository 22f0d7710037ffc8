package index

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestSplitPartitionsActive: split puts every id of active in exactly one of next (those in hs)
// and drops (the others), both ascending, whether it steps through active or binary-searches
// the holders in it, and also when next is written into active's own array (the walk's
// in-place step).
func TestSplitPartitionsActive(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ids := func(maxLen int) *rapid.Generator[[]uint32] {
			return rapid.SliceOfNDistinct(rapid.Uint32Range(0, 300), 0, maxLen, rapid.ID[uint32])
		}
		active := slices.Sorted(slices.Values(ids(200).Draw(rt, "active")))
		maxHolders := rapid.SampledFrom([]int{3, 20, 200}).Draw(rt, "max holders") // few: binary search
		hs := slices.Sorted(slices.Values(ids(maxHolders).Draw(rt, "holders")))
		var wantNext, wantDrops []uint32
		for _, id := range active {
			if _, in := slices.BinarySearch(hs, id); in {
				wantNext = append(wantNext, id)
			} else {
				wantDrops = append(wantDrops, id)
			}
		}
		inPlace := slices.Clone(active)
		for name, next := range map[string][]uint32{"apart": nil, "in place": inPlace[:0]} {
			src := active
			if name == "in place" {
				src = inPlace
			}
			gotNext, gotDrops := split(next, []uint32{7}, src, hs)
			if !slices.Equal(gotNext, wantNext) || !slices.Equal(gotDrops[1:], wantDrops) || gotDrops[0] != 7 {
				rt.Fatalf("%s: next %v drops %v; want %v, [7] + %v", name, gotNext, gotDrops, wantNext, wantDrops)
			}
		}
	})
}
