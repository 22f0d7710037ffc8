package workload

// SMG's pinned workload: the normative stream of SMG's chain-native radix tree
// (smg-project/smg, crates/radix_tree/README.md and tests/pinned_bench.rs), regenerated draw for
// draw from its description so kvindex can be measured on the very stream SMG publishes its
// figures for. Written from the description of the stream, not from SMG's code.
//
// The stream: families of shared chains, each held by 1, 8 or 64 holders (holders base, base+7,
// base+14, … modulo the holder count), until each sharing class has its share of the block
// budget in holder-blocks; a shared prefix of log-uniform length, then per holder a divergent
// tail of uniform length, stored 8 blocks per Stored (parent = the previous batch's last
// block); some batches published twice (duplicates, idempotent), then interior blocks removed
// (holes). Per holder the order is kept; holders are interleaved at random. Then the query
// cells: per sharing class up to 2,000 prefixes of random depth, the gate cell (depth 78 of
// families held by 64 holders) and 1,000 misses.
//
// A block's key (SMG's BlockKey) is the event's block hash; its content (ContentHash) the
// tokens hash; queries are contents, as find_matches' local hashes.

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/kvindex/kvindex/event"
)

// SMGShare is one sharing class: families held by Holders holders take Percent of the block
// budget (counted in holder-blocks of their shared prefixes).
type SMGShare struct {
	Holders int
	Percent uint64
}

// SMGProfile is one shape of SMG's stream.
type SMGProfile struct {
	Name         string
	Holders      int
	TargetBlocks uint64 // shared-prefix holder-blocks budget, split by Sharing
	Sharing      [3]SMGShare
	SharedDepth  [2]uint32 // log-uniform, inclusive
	TailLen      [2]uint32 // uniform, inclusive
	DuplicatePct uint64    // share of batches published twice
	// Holes: with HoleInstancePct, that share of (family, holder) instances loses one interior
	// block; with HoleBlockPct, every instance loses that share of its interior blocks.
	HoleInstancePct uint64
	HoleBlockPct    uint64
}

// SMGGateDepth is the depth of SMG's gate cell (queried on families held by 64 holders).
const SMGGateDepth = 78

const (
	smgSeed      = 20260901
	smgBatch     = 8
	smgCellMax   = 2000
	smgMisses    = 1000
	smgMissMaxLn = 96
	smgGateLen   = 96 // the one forced gate family's shared length
)

// SMGPinned is SMG's normative profile: 10 M shared holder-blocks (12.8 M with the tails),
// 256 holders.
func SMGPinned() SMGProfile {
	return SMGProfile{
		Name: "smg-pinned", Holders: 256, TargetBlocks: 10_000_000,
		Sharing:     [3]SMGShare{{1, 50}, {8, 35}, {64, 15}},
		SharedDepth: [2]uint32{8, 512}, TailLen: [2]uint32{4, 64},
		DuplicatePct: 5, HoleInstancePct: 20,
	}
}

// SMGFragmented is the pinned profile with 2 % of every instance's interior blocks removed.
func SMGFragmented() SMGProfile {
	p := SMGPinned()
	p.Name, p.HoleInstancePct, p.HoleBlockPct = "smg-fragmented", 0, 2
	return p
}

// SMGLarge is SMG's large scale: 8× the blocks (≈128 M holder-blocks) over 2,048 holders.
func SMGLarge() SMGProfile {
	p := SMGPinned()
	p.Name, p.Holders, p.TargetBlocks = "smg-large", 2048, 100_000_000
	return p
}

// SMGProfiles lists the profiles by name (`kvindex bench --workload NAME`).
func SMGProfiles() []SMGProfile {
	return []SMGProfile{SMGPinned(), SMGFragmented(), SMGLarge()}
}

// SMGProfileNamed returns the profile called name.
func SMGProfileNamed(name string) (SMGProfile, bool) {
	for _, p := range SMGProfiles() {
		if p.Name == name {
			return p, true
		}
	}
	return SMGProfile{}, false
}

// SMGFamily is one shared chain and its holders.
type SMGFamily struct {
	Blocks  []event.Block // the shared prefix: BlockHash = SMG's key, TokensHash = its content
	Holders []uint32      // ascending
	// Held[i] is how many leading blocks Holders[i] holds once the stream is applied: its
	// first hole's position, or len(Blocks) without one.
	Held []int32
}

// SMGOp is one event of the stream.
type SMGOp struct {
	Holder    uint32
	Remove    bool
	HasParent bool
	Parent    uint64
	Blocks    []event.Block // Stored: shares the family's (or tail's) array, never modify
	Keys      []uint64      // Removed
}

// Event returns the op as a RouterEvent of rank Rank(op.Holder).
func (op *SMGOp) Event() event.RouterEvent {
	r := SMGRank(op.Holder)
	if op.Remove {
		return event.Removed(r, 0, op.Keys...)
	}
	ev := event.Stored(r, 0, nil, op.Blocks...)
	ev.HasParent, ev.ParentHash = op.HasParent, op.Parent
	return ev
}

// SMGRank is holder h's rank.
func SMGRank(h uint32) event.Rank { return event.Rank{WorkerID: uint64(h) + 1} }

// SMGQuery is one query of a cell: the contents of the first Depth blocks of Family, or a miss
// (Family -1: random contents nobody holds).
type SMGQuery struct {
	Family   int32
	Contents []uint64
}

// SMGCell is one query cell of SMG's table.
type SMGCell struct {
	Name    string
	Queries []SMGQuery
}

// SMGWorkload is the generated stream and its query cells.
type SMGWorkload struct {
	Profile  SMGProfile
	Families []SMGFamily
	Ops      []SMGOp
	Cells    []SMGCell
	// StreamBlocks counts the blocks named by every op (stored, duplicated, removed);
	// HolderBlocks the holder-blocks stored (shared prefixes and tails, without duplicates);
	// RemovedBlocks those the holes take out. Resident = HolderBlocks − RemovedBlocks.
	StreamBlocks, HolderBlocks, RemovedBlocks uint64
}

// Resident is the number of (holder, block) entries held once the stream is applied.
func (w *SMGWorkload) Resident() uint64 { return w.HolderBlocks - w.RemovedBlocks }

// Want calls fn with every holder's expected score for q (holders scoring 0 omitted), in
// ascending holder order.
func (w *SMGWorkload) Want(q SMGQuery, fn func(holder uint32, score int)) {
	if q.Family < 0 {
		return
	}
	f := &w.Families[q.Family]
	for i, h := range f.Holders {
		if s := min(int(f.Held[i]), len(q.Contents)); s > 0 {
			fn(h, s)
		}
	}
}

// splitMix64 is SMG's generator (SplitMix64), so the stream matches draw for draw.
type splitMix64 struct{ s uint64 }

func (r *splitMix64) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

func (r *splitMix64) below(n int) int        { return int(r.next() % uint64(n)) }
func (r *splitMix64) chance(pct uint64) bool { return r.next()%100 < pct }

// logUniform draws from [lo, hi] log-uniformly, rounded to the nearest integer.
func (r *splitMix64) logUniform(lo, hi uint32) uint32 {
	llo, lhi := math.Log(float64(lo)), math.Log(float64(hi))
	u := float64(r.next()>>11) / float64(uint64(1)<<53)
	return uint32(math.Round(math.Exp(llo + u*(lhi-llo))))
}

// GenerateSMG generates profile p's stream and cells (deterministic: seed 20260901).
func GenerateSMG(p SMGProfile) (*SMGWorkload, error) {
	if p.Holders <= 0 || p.TargetBlocks == 0 || p.SharedDepth[0] == 0 || p.SharedDepth[0] > p.SharedDepth[1] ||
		p.TailLen[0] == 0 || p.TailLen[0] > p.TailLen[1] {
		return nil, fmt.Errorf("%w: SMG profile %q needs holders > 0, a block budget and non-empty depth and tail ranges", ErrBadOptions, p.Name)
	}
	rng := &splitMix64{s: smgSeed}
	w := &SMGWorkload{Profile: p}
	w.families(rng)
	w.ops(rng)
	w.cells(rng)
	return w, nil
}

func (w *SMGWorkload) families(rng *splitMix64) {
	p := w.Profile
	forceGate := true
	for _, sh := range p.Sharing {
		budget := p.TargetBlocks * sh.Percent / 100
		for used := uint64(0); used < budget; {
			var n uint32
			if forceGate && sh.Holders == 64 {
				forceGate, n = false, smgGateLen
			} else {
				n = rng.logUniform(p.SharedDepth[0], p.SharedDepth[1])
			}
			blocks := make([]event.Block, n)
			var prev uint64
			for i := range blocks {
				content := rng.next() | 1
				key := content
				if i > 0 {
					key = (prev^bits.RotateLeft64(content, 17))*0x2545F4914F6CDD1D | 1
				}
				blocks[i], prev = event.Block{BlockHash: key, TokensHash: content}, key
			}
			base := rng.below(p.Holders)
			members := make([]uint32, sh.Holders)
			for k := range members {
				members[k] = uint32((base + k*7) % p.Holders)
			}
			slices.Sort(members)
			members = slices.Compact(members)
			held := make([]int32, len(members))
			for i := range held {
				held[i] = int32(n)
			}
			used += uint64(n) * uint64(len(members))
			w.Families = append(w.Families, SMGFamily{Blocks: blocks, Holders: members, Held: held})
		}
	}
}

// batches appends blocks as Stored ops of smgBatch blocks, the first with parent (if has).
func batches(dst []SMGOp, h uint32, has bool, parent uint64, blocks []event.Block) ([]SMGOp, uint64) {
	for lo := 0; lo < len(blocks); lo += smgBatch {
		chunk := blocks[lo:min(lo+smgBatch, len(blocks)):min(lo+smgBatch, len(blocks))]
		dst = append(dst, SMGOp{Holder: h, HasParent: has, Parent: parent, Blocks: chunk})
		has, parent = true, chunk[len(chunk)-1].BlockHash
	}
	return dst, parent
}

func (w *SMGWorkload) ops(rng *splitMix64) {
	p := w.Profile
	script := make([][]SMGOp, p.Holders)
	var pool []int
	for fi := range w.Families {
		f := &w.Families[fi]
		for mi, h := range f.Holders {
			own, last := batches(nil, h, false, 0, f.Blocks)
			tail := make([]event.Block, p.TailLen[0]+uint32(rng.next()%uint64(p.TailLen[1]-p.TailLen[0]+1)))
			prev := last
			for i := range tail {
				content := rng.next() | 1
				key := ((prev^bits.RotateLeft64(content, 29))*0x9E3779B97F4A7C15 + uint64(h)) | 1
				tail[i], prev = event.Block{BlockHash: key, TokensHash: content}, key
			}
			own, _ = batches(own, h, true, last, tail)
			w.HolderBlocks += uint64(len(f.Blocks) + len(tail))
			stores := len(own)
			for i := range stores {
				if rng.chance(p.DuplicatePct) {
					own = append(own, own[i])
				}
			}
			if interior := len(f.Blocks) - 2; interior > 0 {
				victims := 0
				if p.HoleBlockPct > 0 {
					scaled := p.HoleBlockPct * uint64(interior)
					victims = int(scaled / 100)
					if rng.chance(scaled % 100) {
						victims++
					}
				} else if rng.chance(p.HoleInstancePct) {
					victims = 1
				}
				victims = min(victims, interior)
				if victims > 0 {
					pool = pool[:0]
					for i := 1; i <= interior; i++ {
						pool = append(pool, i)
					}
					keys := make([]uint64, victims)
					for v := range keys {
						pick := v + rng.below(len(pool)-v)
						pool[v], pool[pick] = pool[pick], pool[v]
						keys[v] = f.Blocks[pool[v]].BlockHash
						f.Held[mi] = min(f.Held[mi], int32(pool[v]))
					}
					w.RemovedBlocks += uint64(victims)
					own = append(own, SMGOp{Holder: h, Remove: true, Keys: keys})
				}
			}
			script[h] = append(script[h], own...)
		}
	}
	var live []uint32
	total := 0
	for h, s := range script {
		if len(s) > 0 {
			live = append(live, uint32(h))
			total += len(s)
		}
	}
	w.Ops = make([]SMGOp, 0, total)
	cursor := make([]int, p.Holders)
	for len(live) > 0 {
		li := rng.below(len(live))
		h := live[li]
		op := script[h][cursor[h]]
		w.Ops = append(w.Ops, op)
		w.StreamBlocks += uint64(len(op.Blocks) + len(op.Keys))
		if cursor[h]++; cursor[h] == len(script[h]) {
			script[h] = nil
			live[li] = live[len(live)-1]
			live = live[:len(live)-1]
		}
	}
}

func contents(blocks []event.Block) []uint64 {
	out := make([]uint64, len(blocks))
	for i, b := range blocks {
		out[i] = b.TokensHash
	}
	return out
}

func (w *SMGWorkload) cells(rng *splitMix64) {
	for _, sh := range w.Profile.Sharing {
		c := SMGCell{Name: fmt.Sprintf("H=%d", sh.Holders)}
		for fi, f := range w.Families {
			if len(f.Holders) != sh.Holders {
				continue
			}
			if len(c.Queries) >= smgCellMax {
				break
			}
			d := 1 + rng.below(len(f.Blocks))
			c.Queries = append(c.Queries, SMGQuery{Family: int32(fi), Contents: contents(f.Blocks[:d])})
		}
		w.Cells = append(w.Cells, c)
	}
	gate := SMGCell{Name: fmt.Sprintf("gate d=%d W=64", SMGGateDepth)}
	for fi, f := range w.Families {
		if len(f.Holders) == 64 && len(f.Blocks) >= SMGGateDepth && len(gate.Queries) < smgCellMax {
			gate.Queries = append(gate.Queries, SMGQuery{Family: int32(fi), Contents: contents(f.Blocks[:SMGGateDepth])})
		}
	}
	w.Cells = append(w.Cells, gate)
	miss := SMGCell{Name: "miss"}
	for range smgMisses {
		q := make([]uint64, 1+rng.below(smgMissMaxLn))
		for i := range q {
			q[i] = rng.next() | 1
		}
		miss.Queries = append(miss.Queries, SMGQuery{Family: -1, Contents: q})
	}
	w.Cells = append(w.Cells, miss)
}
