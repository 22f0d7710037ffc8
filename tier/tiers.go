package tier

import (
	"slices"
	"sync"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
)

// Tiers is one partition's KV state in every storage tier: the device radix tree (an
// index.Index) and one lower-tier Index per lower tier, sharing one rank registry. It routes
// events by tier (Apply) and answers queries with the tier walk (FindMatchesInto, Extend).
//
// Writers: for a given rank at most one goroutine at a time calls Apply, ClearRank, ReplaceRank,
// RemoveRank and DumpRank (the rank's lane); different ranks are written concurrently. Readers
// run on any goroutine at any time.
type Tiers struct {
	Device *index.Index
	lower  [numLower]*Index
	reg    *registry

	scratch sync.Pool // *walkScratch
}

// New returns the tiers of a partition whose device tree is dev (index.New when nil).
func New(dev *index.Index) *Tiers {
	if dev == nil {
		dev = index.New(index.Options{})
	}
	t := &Tiers{Device: dev, reg: newRegistry()}
	for i, tr := range Lower {
		t.lower[i] = newIndex(tr, t.reg)
	}
	t.scratch.New = func() any { return new(walkScratch) }
	return t
}

// Lower returns the index of a lower tier, nil for the device tier or an unknown one.
func (t *Tiers) Lower(tr event.Tier) *Index {
	if tr >= event.TierHostPinned && int(tr) <= numLower {
		return t.lower[tr-1]
	}
	return nil
}

// Apply applies one logged event of any tier: a device event to the tree, a Stored or Removed of a
// lower tier to that tier's index, and a Cleared — whatever tier it is tagged with — to the tree
// and every lower tier (docs/CONTRACT.md §7). The Result is the tree's for device events and Cleared, the
// tier's otherwise. An event of an unknown tier is invalid_block and changes nothing.
func (t *Tiers) Apply(ev *event.RouterEvent) index.Result {
	if ev.Kind == event.KindCleared {
		res := t.Device.Apply(ev)
		t.clearLower(ev.Rank())
		return res
	}
	if ev.Tier == event.TierDevice {
		return t.Device.Apply(ev)
	}
	if lx := t.Lower(ev.Tier); lx != nil {
		return lx.apply(ev)
	}
	return index.Result{Status: index.StatusInvalidBlock}
}

func (t *Tiers) clearLower(r event.Rank) {
	if re := t.reg.get(r); re != nil {
		for _, lx := range t.lower {
			lx.clearRank(re)
		}
	}
}

// ClearRank drops every block of r in every tier; r stays known.
func (t *Tiers) ClearRank(r event.Rank) {
	t.Device.ClearRank(r)
	t.clearLower(r)
}

// RemoveRank drops every block of r in every tier and forgets r; it reports whether r was known
// to any tier.
func (t *Tiers) RemoveRank(r event.Rank) bool {
	known := t.Device.RemoveRank(r)
	if re := t.reg.get(r); re != nil {
		for _, lx := range t.lower {
			lx.clearRank(re)
		}
		t.reg.remove(r)
		known = true
	}
	return known
}

// RemoveWorker removes every rank of a worker from every tier and returns how many there were.
func (t *Tiers) RemoveWorker(workerID uint64) int {
	n := 0
	for _, r := range t.Ranks() {
		if r.WorkerID == workerID && t.RemoveRank(r) {
			n++
		}
	}
	return n
}

// ReplaceRank clears r in every tier, then applies the Stored events of a dump (DumpRank) to r,
// each to the tier it is tagged with, whatever rank the events name. Other kinds are ignored.
// r becomes known to the tree.
func (t *Tiers) ReplaceRank(r event.Rank, dump []event.RouterEvent) {
	var device []event.RouterEvent
	for i := range dump {
		if dump[i].Tier == event.TierDevice {
			device = append(device, dump[i])
		}
	}
	t.Device.ReplaceRank(r, device)
	t.clearLower(r)
	for i := range dump {
		ev := &dump[i]
		if ev.Kind != event.KindStored || ev.Tier == event.TierDevice {
			continue
		}
		if lx := t.Lower(ev.Tier); lx != nil {
			c := *ev
			c.Partition, c.WorkerID, c.DPRank = r.Partition, r.WorkerID, r.DPRank
			lx.stored(&c)
		}
	}
}

// RegisterRanks makes ranks known to the tree at once (index.RegisterRanks); the lower tiers
// register a rank with its first Stored there.
func (t *Tiers) RegisterRanks(ranks []event.Rank) { t.Device.RegisterRanks(ranks) }

// RankBlocks returns the device blocks r holds (its tree_size).
func (t *Tiers) RankBlocks(r event.Rank) uint64 { return t.Device.RankBlocks(r) }

// RankHashes calls fn with every device block r holds (index.Index.RankHashes). A writer method.
func (t *Tiers) RankHashes(r event.Rank, fn func(blockHash, tokensHash uint64)) {
	t.Device.RankHashes(r, fn)
}

// TierBlocks returns the blocks r holds in each tier, indexed by event.Tier.
func (t *Tiers) TierBlocks(r event.Rank) [numLower + 1]uint64 {
	out := [numLower + 1]uint64{t.Device.RankBlocks(r)}
	if re := t.reg.get(r); re != nil {
		for i := range t.lower {
			out[i+1] = re.blocks[i].Load()
		}
	}
	return out
}

// Reserve makes room for blocks device blocks of r (index.Index.Reserve). A writer method.
func (t *Tiers) Reserve(r event.Rank, blocks int) { t.Device.Reserve(r, blocks) }

// Holds reports whether r holds a block in any tier.
func (t *Tiers) Holds(r event.Rank) bool {
	for _, n := range t.TierBlocks(r) {
		if n > 0 {
			return true
		}
	}
	return false
}

// Ranks returns every rank known to the tree or to a lower tier, sorted by worker id, then dp
// rank (with their partition as the tree knows it; a rank known to the lower tiers only carries
// the partition of its first lower-tier event).
func (t *Tiers) Ranks() []event.Rank {
	seen := map[rankKey]bool{}
	var out []event.Rank
	for _, ri := range t.Device.Ranks() {
		seen[keyOf(ri.Rank)] = true
		out = append(out, ri.Rank)
	}
	for _, re := range t.reg.view.Load().byID {
		if re != nil && !seen[keyOf(re.rank)] {
			out = append(out, re.rank)
		}
	}
	slices.SortFunc(out, event.Rank.Compare)
	return out
}

// LowerEdges returns the number of live edges over every lower tier (0: the walk has nothing to
// do).
func (t *Tiers) LowerEdges() int64 {
	n := int64(0)
	for _, lx := range t.lower {
		n += lx.Edges()
	}
	return n
}
