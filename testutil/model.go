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
func NewModel() *Model { return &Model{ranks: map[event.Rank]*modelRank{}} }

// Apply applies one event (the tier is ignored).
func (m *Model) Apply(ev *event.RouterEvent) Outcome {
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

// RemoveRank forgets r and reports whether it was known.
func (m *Model) RemoveRank(r event.Rank) bool {
	_, ok := m.ranks[r]
	delete(m.ranks, r)
	return ok
}

// RemoveWorker forgets every rank of a worker and returns how many there were.
func (m *Model) RemoveWorker(workerID uint64) int {
	n := 0
	for r := range m.ranks {
		if r.WorkerID == workerID {
			delete(m.ranks, r)
			n++
		}
	}
	return n
}

// Ranks returns the known ranks, sorted by worker id, then dp rank.
func (m *Model) Ranks() []event.Rank {
	return slices.SortedFunc(maps.Keys(m.ranks), func(a, b event.Rank) int {
		switch {
		case a.Less(b):
			return -1
		case b.Less(a):
			return 1
		}
		return 0
	})
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
