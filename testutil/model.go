package testutil

import (
	"encoding/binary"
	"maps"
	"slices"

	"github.com/kvindex/kvindex/event"
)

// Model is the reference oracle of the index. Per rank it keeps `held`: every block hash
// stored and not removed, with its tokens hash, its parent (a block hash, or the root) and its
// position (the tokens hashes from the root down to it, fixed when it was stored). A rank
// becomes known with its first Stored that applies (the index's rule) and is forgotten by
// RemoveRank.
//
// The statuses it returns are the index's Status strings ("ok", "parent_block_not_found",
// "block_not_found", "invalid_block").
type Model struct {
	ranks map[event.Rank]*modelRank
	lower [3]*modelTier // host_pinned, disk, external (docs/CONTRACT.md §7)
}

// ModelBlock is one held block.
type ModelBlock struct {
	TokensHash uint64
	HasParent  bool
	ParentHash uint64
	Path       []uint64 // tokens hashes from the root to this block, inclusive
}

type modelRank struct {
	held map[uint64]ModelBlock
}

// Outcome is what applying one event did in the model.
type Outcome struct {
	Status   string
	Blocks   int // blocks stored or removed
	NotFound int // Removed hashes the rank did not hold
}

// NewModel returns an empty model.
func NewModel() *Model {
	m := &Model{ranks: map[event.Rank]*modelRank{}}
	for i := range m.lower {
		m.lower[i] = &modelTier{edges: map[EdgeKey]*modelEdge{}, held: map[event.Rank]map[uint64]EdgeKey{}}
	}
	return m
}

// Apply applies one event: a device event to the rank's blocks, a Stored or Removed of a lower
// tier to that tier's edges, a Cleared (of any tier) to every tier.
func (m *Model) Apply(ev *event.RouterEvent) Outcome {
	if ev.Kind == event.KindCleared {
		m.clearLower(ev.Rank())
	} else if ev.Tier != event.TierDevice {
		if int(ev.Tier) > len(m.lower) {
			return Outcome{Status: "invalid_block"}
		}
		return m.lower[ev.Tier-1].apply(ev)
	}
	r := ev.Rank()
	mr := m.ranks[r]
	switch ev.Kind {
	case event.KindStored:
		for i, b := range ev.Blocks {
			if (ev.HasParent && b.BlockHash == ev.ParentHash) || (i > 0 && b.BlockHash == ev.Blocks[i-1].BlockHash) {
				return Outcome{Status: "invalid_block"}
			}
		}
		var path []uint64
		if ev.HasParent {
			if mr == nil {
				return Outcome{Status: "parent_block_not_found"}
			}
			p, ok := mr.held[ev.ParentHash]
			if !ok {
				return Outcome{Status: "parent_block_not_found"}
			}
			path = p.Path
		}
		if mr == nil {
			mr = &modelRank{held: map[uint64]ModelBlock{}}
			m.ranks[r] = mr
		}
		hasParent, parent := ev.HasParent, ev.ParentHash
		for _, b := range ev.Blocks {
			path = append(slices.Clip(path), b.TokensHash)
			mr.held[b.BlockHash] = ModelBlock{TokensHash: b.TokensHash, HasParent: hasParent, ParentHash: parent, Path: path}
			hasParent, parent = true, b.BlockHash
		}
		return Outcome{Status: "ok", Blocks: len(ev.Blocks)}
	case event.KindRemoved:
		o := Outcome{Status: "ok"}
		for _, h := range ev.Removed {
			if mr == nil {
				o.NotFound++
				continue
			}
			if _, ok := mr.held[h]; !ok {
				o.NotFound++
				continue
			}
			delete(mr.held, h)
			o.Blocks++
		}
		if o.NotFound > 0 {
			o.Status = "block_not_found"
		}
		return o
	case event.KindCleared:
		m.ClearRank(r)
		return Outcome{Status: "ok"}
	}
	return Outcome{Status: "invalid_block"}
}

// ClearRank drops every block of r; r stays known.
func (m *Model) ClearRank(r event.Rank) {
	if mr := m.ranks[r]; mr != nil {
		clear(mr.held)
	}
}

// RemoveRank forgets r (in every tier) and reports whether the device tree knew it.
func (m *Model) RemoveRank(r event.Rank) bool {
	_, ok := m.ranks[r]
	delete(m.ranks, r)
	m.clearLower(r)
	return ok
}

// RemoveWorker forgets every rank of a worker (in every tier) and returns how many ranks the
// device tree knew.
func (m *Model) RemoveWorker(workerID uint64) int {
	n := 0
	for r := range m.ranks {
		if r.WorkerID == workerID {
			delete(m.ranks, r)
			n++
		}
	}
	for _, t := range m.lower {
		for r := range t.held {
			if r.WorkerID == workerID {
				t.clear(r)
			}
		}
	}
	return n
}

// Ranks returns the known ranks, sorted by worker id, then dp rank.
func (m *Model) Ranks() []event.Rank {
	return slices.SortedFunc(maps.Keys(m.ranks), event.Rank.Compare)
}

// Held returns the number of blocks r holds.
func (m *Model) Held(r event.Rank) int {
	if mr := m.ranks[r]; mr != nil {
		return len(mr.held)
	}
	return 0
}

// Block returns a held block of r.
func (m *Model) Block(r event.Rank, blockHash uint64) (ModelBlock, bool) {
	if mr := m.ranks[r]; mr != nil {
		b, ok := mr.held[blockHash]
		return b, ok
	}
	return ModelBlock{}, false
}

// HeldBlocks returns the block hashes r holds, ascending.
func (m *Model) HeldBlocks(r event.Rank) []uint64 {
	if mr := m.ranks[r]; mr != nil {
		return slices.Sorted(maps.Keys(mr.held))
	}
	return nil
}

func pathKey(p []uint64) string {
	b := make([]byte, 0, 8*len(p))
	for _, h := range p {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	return string(b)
}

// positions maps a position key to the held block hashes at that position.
func (mr *modelRank) positions() map[string][]uint64 {
	pos := make(map[string][]uint64, len(mr.held))
	for h, b := range mr.held {
		k := pathKey(b.Path)
		pos[k] = append(pos[k], h)
	}
	return pos
}

// HeldPrefix is the upper bound of r's score for a query of local hashes: the number of leading
// query blocks such that r holds a block at every position query[:1], query[:2], … — whether or
// not those blocks are linked to each other by parent hash.
func (m *Model) HeldPrefix(r event.Rank, localHashes []uint64) int {
	mr := m.ranks[r]
	if mr == nil {
		return 0
	}
	pos := mr.positions()
	k := 0
	for k < len(localHashes) && len(pos[pathKey(localHashes[:k+1])]) > 0 {
		k++
	}
	return k
}

// ReachablePrefix is the lower bound of r's score: the number of leading query blocks r holds as
// one chain linked by parent hash from the root, each block at its query position.
func (m *Model) ReachablePrefix(r event.Rank, localHashes []uint64) int {
	mr := m.ranks[r]
	if mr == nil {
		return 0
	}
	pos := mr.positions()
	var frontier map[uint64]bool // blocks reachable at the previous depth
	for k := range localHashes {
		next := map[uint64]bool{}
		for _, h := range pos[pathKey(localHashes[:k+1])] {
			b := mr.held[h]
			if (k == 0 && !b.HasParent) || (k > 0 && b.HasParent && frontier[b.ParentHash]) {
				next[h] = true
			}
		}
		if len(next) == 0 {
			return k
		}
		frontier = next
	}
	return len(localHashes)
}

// Reachable returns the number of r's blocks whose whole parent chain r holds back to the root,
// each parent at the position the block was stored under.
func (m *Model) Reachable(r event.Rank) int {
	mr := m.ranks[r]
	if mr == nil {
		return 0
	}
	memo := map[uint64]bool{}
	var reach func(h uint64) bool
	reach = func(h uint64) bool {
		if v, ok := memo[h]; ok {
			return v
		}
		b := mr.held[h]
		ok := !b.HasParent
		if b.HasParent {
			p, held := mr.held[b.ParentHash]
			ok = held && slices.Equal(p.Path, b.Path[:len(b.Path)-1]) && reach(b.ParentHash)
		}
		memo[h] = ok
		return ok
	}
	n := 0
	for h := range mr.held {
		if reach(h) {
			n++
		}
	}
	return n
}

// EdgeKey is a lower-tier continuation edge's key: (parent block hash | root, tokens hash).
type EdgeKey struct {
	Root       bool
	ParentHash uint64 // 0 with Root
	TokensHash uint64
}

type modelEdge struct {
	child   uint64
	holders map[event.Rank]bool
}

// modelTier is one lower tier (docs/CONTRACT.md §7): edges with their holders, and per rank the block hashes
// it holds with their edge.
type modelTier struct {
	edges map[EdgeKey]*modelEdge
	held  map[event.Rank]map[uint64]EdgeKey
}

func (t *modelTier) apply(ev *event.RouterEvent) Outcome {
	r := ev.Rank()
	switch ev.Kind {
	case event.KindStored:
		for i, b := range ev.Blocks {
			if (ev.HasParent && b.BlockHash == ev.ParentHash) || (i > 0 && b.BlockHash == ev.Blocks[i-1].BlockHash) {
				return Outcome{Status: "invalid_block"}
			}
		}
		if t.held[r] == nil {
			t.held[r] = map[uint64]EdgeKey{}
		}
		o := Outcome{Status: "ok"}
		k := EdgeKey{Root: !ev.HasParent}
		if ev.HasParent {
			k.ParentHash = ev.ParentHash
		}
		for _, b := range ev.Blocks {
			k.TokensHash = b.TokensHash
			if have, ok := t.held[r][b.BlockHash]; ok {
				if have != k {
					break // held under another edge: the chain stops
				}
			} else {
				e := t.edges[k]
				if e != nil && e.child != b.BlockHash {
					break // the first mapping wins: the chain stops
				}
				if e == nil {
					e = &modelEdge{child: b.BlockHash, holders: map[event.Rank]bool{}}
					t.edges[k] = e
				}
				e.holders[r] = true
				t.held[r][b.BlockHash] = k
			}
			o.Blocks++
			k = EdgeKey{ParentHash: b.BlockHash}
		}
		return o
	case event.KindRemoved:
		o := Outcome{Status: "ok"}
		for _, h := range ev.Removed {
			k, ok := t.held[r][h]
			if !ok {
				o.NotFound++
				continue
			}
			t.drop(r, h, k)
			o.Blocks++
		}
		if o.NotFound > 0 {
			o.Status = "block_not_found"
		}
		return o
	}
	return Outcome{Status: "invalid_block"}
}

func (t *modelTier) drop(r event.Rank, h uint64, k EdgeKey) {
	delete(t.held[r], h)
	e := t.edges[k]
	delete(e.holders, r)
	if len(e.holders) == 0 {
		delete(t.edges, k)
	}
}

func (t *modelTier) clear(r event.Rank) {
	for h, k := range t.held[r] {
		t.drop(r, h, k)
	}
	delete(t.held, r)
}

func (m *Model) clearLower(r event.Rank) {
	for _, t := range m.lower {
		t.clear(r)
	}
}

// TierBlocks returns the blocks r holds in a lower tier (event.TierHostPinned … TierExternal).
func (m *Model) TierBlocks(r event.Rank, tier event.Tier) int {
	return len(m.lower[tier-1].held[r])
}

// TierRanks returns the ranks holding a block in some lower tier, sorted.
func (m *Model) TierRanks() []event.Rank {
	set := map[event.Rank]bool{}
	for _, t := range m.lower {
		for r, h := range t.held {
			if len(h) > 0 {
				set[r] = true
			}
		}
	}
	return slices.SortedFunc(maps.Keys(set), event.Rank.Compare)
}

// TierEdges returns r's edges in a lower tier: block hash → edge key.
func (m *Model) TierEdges(r event.Rank, tier event.Tier) map[uint64]EdgeKey {
	return maps.Clone(m.lower[tier-1].held[r])
}

// Extensions is the tier walk of docs/CONTRACT.md §7 done one rank at a time: for each rank holding
// lower-tier blocks, the blocks each lower tier (host_pinned, disk, external) extends its match
// of the query by. device gives the ranks' device scores; anchor(d) is the block hash a rank
// scoring d continues from (the device walk's path). Ranks without any extension are absent.
func (m *Model) Extensions(q []uint64, device map[event.Rank]int, anchor func(d int) uint64) map[event.Rank][3]int {
	out := map[event.Rank][3]int{}
	if len(q) == 0 {
		return out
	}
	for _, r := range m.TierRanks() {
		pos, has := 0, false
		k := EdgeKey{}
		if d := device[r]; d > 0 {
			pos, has, k = d, true, EdgeKey{ParentHash: anchor(d)}
		}
		var ext [3]int
		for i, t := range m.lower {
			if !has {
				if e := t.edges[EdgeKey{Root: true, TokensHash: q[0]}]; e != nil && e.holders[r] {
					pos, has, k = 0, true, EdgeKey{Root: true}
				} else {
					continue
				}
			}
			start := pos
			for pos < len(q) {
				k.TokensHash = q[pos]
				e := t.edges[k]
				if e == nil || !e.holders[r] {
					break
				}
				k = EdgeKey{ParentHash: e.child}
				pos++
			}
			ext[i] = pos - start
		}
		if ext != [3]int{} {
			out[r] = ext
		}
	}
	return out
}
