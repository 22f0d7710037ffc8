package lanes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
)

// KV-cache groups of hybrid models (docs/API.md "KV-cache groups").
//
// vLLM keeps one KV-cache group per attention kind of a hybrid model and reports every block once
// per group, with the same engine hash in each (event.RouterEvent.Group). Only the indexed kinds
// (Options.IndexedKinds, by default the main attention kinds full_attention, mla_attention and
// sink_full_attention) describe a reusable prefix. Two places in the write path handle them:
//
//   - On the decider, before an event is logged (classify): the rank learns each group it
//     reports, (group_idx) → kind, block size, sliding window; a removal that names its group
//     but not its kind takes the kind the group was seen with. An event of a kind that is not
//     indexed (sliding window, Mamba, an unknown future kind, ...) is logged with its group but
//     without its blocks: it keeps its event id (ids stay contiguous) and never changes the
//     tree, whoever replays the log (restart, retention, range answers, exports). It is counted
//     per rank and group (RankStatus.Groups) and by kind (Listener.GroupIgnored).
//   - On the applier, in front of the tree (groupGate): while a rank has one indexed group, its
//     events go to the tree as they are (the tree's own rules, no extra state). Once a second
//     indexed group reports a block, the rank's tree holds exactly the blocks every indexed
//     group holds whose parent chain the tree holds too, so the rank's score is the prefix all
//     its indexed groups share: exact, never an over-count. The gate keeps which groups hold
//     each block and derives the tree's Stored and Removed from it. Snapshots of a rank with
//     group state (retention: foldGroups; online checkpoints) hold each indexed group's blocks
//     tagged with the group (groupDump), so the restart replay rebuilds the same gate.
//
// Events without group metadata (older vLLM, SGLang, HTTP RouterEvents), and events that name a
// group but no kind the rank ever saw it with, are indexed as today. The gate sees only
// device-tier events; lower tiers take a group's events as they come.

// GroupStatus is what a rank learned of one of its KV-cache groups (RankStatus.Groups).
// Its JSON is the "groups" entry of /v1/ranks (docs/API.md).
type GroupStatus struct {
	Idx           uint32          `json:"group_idx"`
	Kind          event.GroupKind `json:"kind"`
	BlockSize     uint32          `json:"block_size"`     // of the group's newest BlockStored; 0 before one
	SlidingWindow uint32          `json:"sliding_window"` // 0 when the group has none
	Indexed       bool            `json:"indexed"`        // its events change the tree
	Events        uint64          `json:"events"`         // events of the group accepted since the process started
	Ignored       uint64          `json:"ignored"`        // of those, events not indexed (logged without their blocks)
}

// kindsOf is the set of kinds rank r indexes: Options.KindsOf's answer, else (or when it answers
// 0) Options.IndexedKinds. The one place the setting is resolved (docs/API.md "KV-cache groups").
func (p *Pipeline) kindsOf(r event.Rank) event.GroupKinds {
	if f := p.opts.KindsOf; f != nil {
		if k := f(r); k != 0 {
			return k
		}
	}
	return p.opts.IndexedKinds
}

// kindsSource answers which kinds a rank indexes: the live pipeline (its setting as it is now),
// or fixedKinds (one answer kept for a whole rebuild).
type kindsSource interface {
	kindsOf(r event.Rank) event.GroupKinds
}

// fixedKinds is one setting, kept for a rebuild of a rank (restart replay, retention, Regroup)
// that must see it from its first event to its last: Options.KindsOf may answer differently
// meanwhile, and a gate built half under one setting and half under another can hold a block a
// group dropped (an over-count).
type fixedKinds event.GroupKinds

func (k fixedKinds) kindsOf(event.Rank) event.GroupKinds { return event.GroupKinds(k) }

// kindsNow is rank r's setting as the pipeline resolves it now, kept for a rebuild.
func (p *Pipeline) kindsNow(r event.Rank) fixedKinds { return fixedKinds(p.kindsOf(r)) }

// offlineKinds is the setting the offline tools rebuild with: indexed, default
// event.MainGroupKinds.
func offlineKinds(indexed event.GroupKinds) fixedKinds {
	if indexed == 0 {
		indexed = event.MainGroupKinds
	}
	return fixedKinds(indexed)
}

// indexedBy reports whether events of kind k of rank r change the tree under ks's setting.
func indexedBy(ks kindsSource, r event.Rank, k event.GroupKind) bool {
	return k == event.GroupKindUnset || ks.kindsOf(r).Has(k)
}

// indexed reports whether events of kind k of rank r change the tree.
func (p *Pipeline) indexed(r event.Rank, k event.GroupKind) bool { return indexedBy(p, r, k) }

// learnGroup records ev's group in the rank's table, resolves an unset kind from it and returns
// the group's entry. Caller holds rs.mu.
func (rs *rankState) learnGroup(g event.Group) *GroupStatus {
	i := sort.Search(len(rs.groups), func(i int) bool { return rs.groups[i].Idx >= g.Idx })
	if i == len(rs.groups) || rs.groups[i].Idx != g.Idx {
		rs.groups = append(rs.groups, GroupStatus{})
		copy(rs.groups[i+1:], rs.groups[i:])
		rs.groups[i] = GroupStatus{Idx: g.Idx}
	}
	gs := &rs.groups[i]
	if g.Kind != event.GroupKindUnset {
		gs.Kind = g.Kind
	}
	if g.BlockSize != 0 {
		gs.BlockSize = g.BlockSize
	}
	if g.SlidingWindow != 0 {
		gs.SlidingWindow = g.SlidingWindow
	}
	return gs
}

// classify (decider, before the event is logged) learns ev's group and returns the event to log:
// ev itself, a copy in scratch with the group's learned kind filled in, or, for a kind that is not
// indexed, a copy without blocks. kind is the resolved kind when ev reports a group (ok).
func (p *Pipeline) classify(rs *rankState, ev *event.RouterEvent, scratch *event.RouterEvent) (out *event.RouterEvent, kind event.GroupKind, ok bool) {
	if !ev.HasGroup || ev.Kind == event.KindCleared {
		return ev, 0, false
	}
	rs.mu.Lock()
	gs := rs.learnGroup(ev.Group)
	kind = gs.Kind
	indexed := p.indexed(rs.rank, kind)
	gs.Indexed = indexed
	first := gs.Events == 0 && kind == event.GroupKindOther
	rs.mu.Unlock()
	if first {
		p.lg.Warn("KV-cache group of a kind kvindex does not know: not indexed", "worker_id", rs.rank.WorkerID,
			"dp_rank", rs.rank.DPRank, "group_idx", ev.Group.Idx)
	}
	if !indexed {
		*scratch = *ev
		scratch.Group.Kind = kind
		scratch.Blocks, scratch.Removed, scratch.HasParent, scratch.ParentHash = nil, nil, false, 0
		return scratch, kind, true
	}
	if kind != ev.Group.Kind {
		*scratch = *ev
		scratch.Group.Kind = kind
		return scratch, kind, true
	}
	return ev, kind, true
}

// countGroup counts an accepted event of a group (decider, after its decision): ignored says it
// was logged without its blocks (nblocks of them).
func (p *Pipeline) countGroup(rs *rankState, g event.Group, kind event.GroupKind, nblocks int) {
	ignored := !p.indexed(rs.rank, kind)
	rs.mu.Lock()
	gs := rs.learnGroup(g)
	gs.Events++
	if ignored {
		gs.Ignored++
	}
	rs.mu.Unlock()
	if f := p.opts.Listener.GroupIgnored; ignored && f != nil {
		f(rs.rank, kind, nblocks)
	}
}

// applyEvent applies a logged event of rs to t through the rank's group gate, under ks's
// setting (applier: the pipeline; restart replay and rebuilds: fixedKinds).
func applyEvent(ks kindsSource, rs *rankState, t Tree, ev *event.RouterEvent) index.Result {
	if ev.Kind == event.KindCleared {
		if rs.gate != nil {
			rs.gate.clear()
		}
		return t.Apply(ev)
	}
	if !ev.HasGroup || ev.Group.Kind == event.GroupKindUnset || ev.Tier != event.TierDevice {
		return t.Apply(ev)
	}
	if !indexedBy(ks, rs.rank, ev.Group.Kind) {
		return index.Result{Status: index.StatusOK} // logged without blocks, or indexed no more
	}
	if rs.gate == nil {
		rs.gate = &groupGate{rank: rs.rank}
	}
	return rs.gate.apply(t, ev)
}

// resetGate forgets the rank's group membership (reset, TreeDump install, removal); the groups
// it learned stay, except on removal (forget).
func (rs *rankState) resetGate(forget bool) {
	rs.gate = nil
	if forget {
		rs.mu.Lock()
		rs.groups = nil
		rs.mu.Unlock()
	}
}

// gatedTree applies a rank's replayed events through its gate (restart replay), learning its
// groups on the way, under one setting.
type gatedTree struct {
	ks fixedKinds
	rs *rankState
	t  Tree
}

func (g gatedTree) Apply(ev *event.RouterEvent) index.Result {
	if ev.HasGroup && ev.Kind != event.KindCleared {
		g.rs.mu.Lock()
		gs := g.rs.learnGroup(ev.Group)
		gs.Indexed = indexedBy(g.ks, g.rs.rank, gs.Kind)
		g.rs.mu.Unlock()
	}
	return applyEvent(g.ks, g.rs, g.t, ev)
}

// Reserve passes the replay's size hint on (recovery.ReplayRank).
func (g gatedTree) Reserve(r event.Rank, n int) {
	if rv, ok := g.t.(interface{ Reserve(event.Rank, int) }); ok {
		rv.Reserve(r, n)
	}
}

// maxGateGroups bounds the indexed groups of one rank the gate tells apart (one bit each).
const maxGateGroups = 64

// groupGate is one rank's membership of its indexed groups, owned by the rank's applier. With
// one indexed group it only remembers which one; from the second on (multi) it keeps every
// block any indexed group holds, which groups hold it, and whether the tree holds it. The tree
// holds a block exactly when every group holds it and the tree holds its parent (or it hangs
// under the root): the reachable part of the groups' intersection.
type groupGate struct {
	rank  event.Rank
	mains []uint32 // the indexed groups, in the order of their first event; bit i of a mask is mains[i]
	multi bool

	blocks map[uint64]*gateBlock // block hash → membership (multi only)
	kids   map[uint64][]uint64   // parent block hash → the held blocks stored under it (multi only)
	ops    []event.Block         // scratch
	rm     []uint64              // scratch
	free   []*gateBlock          // forgotten blocks, reused
}

// gateSlab is how many gateBlocks newBlock allocates at once.
const gateSlab = 128

// newBlock returns a *gateBlock holding v, from the free list or a new slab.
func (g *groupGate) newBlock(v gateBlock) *gateBlock {
	if len(g.free) == 0 {
		slab := make([]gateBlock, gateSlab)
		for i := range slab {
			g.free = append(g.free, &slab[i])
		}
	}
	e := g.free[len(g.free)-1]
	g.free = g.free[:len(g.free)-1]
	*e = v
	return e
}

type gateBlock struct {
	tokens    uint64
	parent    uint64
	hasParent bool
	mask      uint64 // bit i: mains[i] holds the block
	inTree    bool
	// orphan: the tree held the block stranded (its parent block left the rank) when the gate
	// took over, so its parent hash is unknown until a group stores it again. It never enters
	// the tree before that, and no snapshot can express it.
	orphan bool
}

func (g *groupGate) full() uint64 { return 1<<len(g.mains) - 1 }

// clear forgets every block (a Cleared: every group dropped everything); the groups stay.
func (g *groupGate) clear() {
	if g.multi {
		for _, e := range g.blocks {
			*e = gateBlock{}
			g.free = append(g.free, e)
		}
		clear(g.blocks)
		clear(g.kids)
	}
}

// bit returns the mask bit of group idx, adding the group on its first event, and whether it
// was new; ok is false past maxGateGroups groups.
func (g *groupGate) bit(idx uint32) (b uint64, isNew, ok bool) {
	for i, m := range g.mains {
		if m == idx {
			return 1 << i, false, true
		}
	}
	if len(g.mains) == maxGateGroups {
		return 0, false, false
	}
	g.mains = append(g.mains, idx)
	return 1 << (len(g.mains) - 1), true, true
}

func (g *groupGate) apply(t Tree, ev *event.RouterEvent) index.Result {
	b, isNew, ok := g.bit(ev.Group.Idx)
	if !ok {
		return index.Result{Status: index.StatusOK, NotFound: len(ev.Removed)}
	}
	if !isNew && ev.Kind != event.KindCleared && len(ev.Blocks) == 0 && len(ev.Removed) == 0 {
		// An event of the group without blocks: logged while its kind was not indexed (the
		// setting changed since), so what the group dropped meanwhile is unknown: it holds
		// nothing until it stores again (an under-count, never an over-count).
		g.resetGroup(t, b)
		return index.Result{Status: index.StatusOK}
	}
	if !g.multi && len(g.mains) == 1 {
		return t.Apply(ev) // one indexed group: the tree's own rules
	}
	if isNew {
		g.addGroup(t)
	}
	switch ev.Kind {
	case event.KindStored:
		return g.store(t, ev, b)
	case event.KindRemoved:
		return g.remove(t, ev, b)
	}
	return index.Result{Status: index.StatusOK}
}

// addGroup (a new indexed group's first event): no block is held by every group any more, so
// the tree lets go of the rank's blocks. The first time (single → multi), the blocks
// the tree holds become the first group's, from the rank's dump.
func (g *groupGate) addGroup(t Tree) {
	g.toMulti(t)
	rm := g.rm[:0]
	for h, e := range g.blocks {
		if e.inTree {
			e.inTree = false
			rm = append(rm, h)
		}
	}
	g.rm = rm[:0]
	g.removeFromTree(t, rm)
}

// removeFromTree takes the blocks rm out of the rank's tree.
func (g *groupGate) removeFromTree(t Tree, rm []uint64) {
	if len(rm) > 0 {
		ev := event.Removed(g.rank, 0, rm...)
		t.Apply(&ev)
	}
}

// resetGroup drops every block group bit b holds; the blocks that leave the intersection leave
// the tree with the blocks under them.
func (g *groupGate) resetGroup(t Tree, b uint64) {
	g.toMulti(t)
	rm := g.rm[:0]
	for h, e := range g.blocks {
		if e.mask&b != 0 {
			rm = g.drop(h, e, b, rm)
		}
	}
	g.rm = rm[:0]
	g.removeFromTree(t, rm)
}

// toMulti makes the gate keep every block's membership (the first time: the blocks the tree
// holds become the first group's, from the rank's dump).
func (g *groupGate) toMulti(t Tree) {
	if !g.multi {
		g.multi = true
		g.blocks = map[uint64]*gateBlock{}
		g.kids = map[uint64][]uint64{}
		if d, ok := t.(dumper); ok {
			_ = d.DumpRank(g.rank, func(ev *event.RouterEvent) error {
				if ev.Kind != event.KindStored || ev.Tier != event.TierDevice {
					return nil
				}
				parent, has := ev.ParentHash, ev.HasParent
				for _, blk := range ev.Blocks {
					if _, dup := g.blocks[blk.BlockHash]; !dup {
						g.blocks[blk.BlockHash] = g.newBlock(gateBlock{tokens: blk.TokensHash, parent: parent, hasParent: has, mask: 1, inTree: true})
						if has {
							g.kids[parent] = append(g.kids[parent], blk.BlockHash)
						}
					}
					parent, has = blk.BlockHash, true
				}
				return nil
			})
			// The dump leaves out blocks stranded under a parent the rank no longer holds: the
			// tree still holds them, and so does the group.
			if hs, ok := t.(interface {
				RankHashes(event.Rank, func(blockHash, tokensHash uint64))
			}); ok {
				hs.RankHashes(g.rank, func(h, tokens uint64) {
					if _, known := g.blocks[h]; !known {
						g.blocks[h] = g.newBlock(gateBlock{tokens: tokens, mask: 1, inTree: true, orphan: true})
					}
				})
			}
		}
	}
}

func (g *groupGate) parentInTree(e *gateBlock) bool {
	if e.orphan {
		return false
	}
	if !e.hasParent {
		return true
	}
	p := g.blocks[e.parent]
	return p != nil && p.inTree
}

// store applies group bit b's Stored: the group's own rules first (its parent must be a block
// it holds; no block is its own parent), then the blocks the whole intersection now holds enter
// the tree, with the held blocks under them.
func (g *groupGate) store(t Tree, ev *event.RouterEvent, b uint64) index.Result {
	parent, has := ev.ParentHash, ev.HasParent
	if has {
		if p := g.blocks[parent]; p == nil || p.mask&b == 0 {
			return index.Result{Status: index.StatusParentNotFound}
		}
	}
	prev, hasPrev := parent, has
	for _, blk := range ev.Blocks {
		if hasPrev && blk.BlockHash == prev {
			return index.Result{Status: index.StatusInvalidBlock}
		}
		prev, hasPrev = blk.BlockHash, true
	}
	full := g.full()
	var enter []uint64
	for _, blk := range ev.Blocks {
		e := g.blocks[blk.BlockHash]
		if e == nil {
			e = g.newBlock(gateBlock{tokens: blk.TokensHash, parent: parent, hasParent: has})
			g.blocks[blk.BlockHash] = e
			if has {
				g.kids[parent] = append(g.kids[parent], blk.BlockHash)
			}
		} else if e.orphan { // stored again: now its parent is known
			e.orphan, e.parent, e.hasParent = false, parent, has
			if has {
				g.kids[parent] = append(g.kids[parent], blk.BlockHash)
			}
		}
		e.mask |= b
		if e.mask == full && !e.inTree && g.parentInTree(e) {
			enter = append(enter, blk.BlockHash)
		}
		parent, has = blk.BlockHash, true
	}
	for _, h := range enter {
		g.enter(t, h)
	}
	return index.Result{Status: index.StatusOK, Blocks: len(ev.Blocks)}
}

// enter stores h (held by every group, its parent in the tree) and then, depth first, the held
// blocks under it that every group holds, a chain per Stored.
func (g *groupGate) enter(t Tree, h uint64) {
	stack := append(g.rm[:0], h)
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		e := g.blocks[x]
		if !g.eligible(e) {
			continue
		}
		var p *uint64
		if e.hasParent {
			v := e.parent
			p = &v
		}
		chain := g.ops[:0]
		for e != nil {
			e.inTree = true
			chain = append(chain, event.Block{BlockHash: x, TokensHash: e.tokens})
			var next *gateBlock
			for _, k := range g.kids[x] {
				ke := g.blocks[k]
				if !g.eligible(ke) {
					continue
				}
				if next == nil {
					next, x = ke, k
				} else {
					stack = append(stack, k) // a branch: its own Stored, after this chain
				}
			}
			e = next
		}
		g.ops = chain[:0]
		st := event.Stored(g.rank, 0, p, chain...)
		t.Apply(&st)
	}
	g.rm = stack[:0]
}

func (g *groupGate) eligible(e *gateBlock) bool {
	return e != nil && !e.inTree && e.mask == g.full() && g.parentInTree(e)
}

// remove applies group bit b's Removed: each named block the group holds leaves it; a block that
// leaves the intersection leaves the tree with the blocks under it the tree holds.
func (g *groupGate) remove(t Tree, ev *event.RouterEvent, b uint64) index.Result {
	res := index.Result{Status: index.StatusOK}
	rm := g.rm[:0]
	for _, h := range ev.Removed {
		e := g.blocks[h]
		if e == nil || e.mask&b == 0 {
			res.NotFound++
			continue
		}
		res.Blocks++
		rm = g.drop(h, e, b, rm)
	}
	g.rm = rm[:0]
	g.removeFromTree(t, rm)
	return res
}

// drop takes block h (entry e) out of group bit b: out of the tree (with the blocks under it,
// appended to rm) as it leaves the intersection, forgotten once no group holds it.
func (g *groupGate) drop(h uint64, e *gateBlock, b uint64, rm []uint64) []uint64 {
	e.mask &^= b
	if e.inTree {
		rm = g.leave(h, rm)
	}
	if e.mask == 0 {
		g.forget(h, e)
	}
	return rm
}

// leave takes h and the blocks under it out of the tree (appending their hashes to rm).
func (g *groupGate) leave(h uint64, rm []uint64) []uint64 {
	stack := []uint64{h}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		e := g.blocks[x]
		if e == nil || !e.inTree {
			continue
		}
		e.inTree = false
		rm = append(rm, x)
		stack = append(stack, g.kids[x]...)
	}
	return rm
}

// forget drops a block no group holds; the blocks under it keep their place under its hash.
func (g *groupGate) forget(h uint64, e *gateBlock) {
	delete(g.blocks, h)
	parent, hasParent := e.parent, e.hasParent
	*e = gateBlock{}
	g.free = append(g.free, e)
	if !hasParent {
		return
	}
	ks := g.kids[parent]
	for i, k := range ks {
		if k == h {
			ks[i] = ks[len(ks)-1]
			ks = ks[:len(ks)-1]
			break
		}
	}
	if len(ks) == 0 {
		delete(g.kids, parent)
	} else {
		g.kids[parent] = ks
	}
}

// groupDump returns the events that rebuild rank rs's state in t through its gate (replayed by
// applyEvent, as a snapshot is at restart): an empty Stored for each group the rank learned that
// is not in its gate (so the rank's groups are listed again, and a setting that indexes one of
// them anew registers it holding nothing) and for each group in the gate's order (which
// registers it), then for a rank of one indexed group its tree dump tagged with that group, or,
// with several, each indexed group's own blocks, group by group, each parent before its
// children. Lower-tier events follow untagged. ok is
// false when the state holds blocks no dump can express (a block held below one its group or
// the tree dropped): the caller keeps the log instead, as recovery.Fold does.
func groupDump(rs *rankState, t Tree) (out []event.RouterEvent, ok bool, err error) {
	g := rs.gate
	d, isDumper := t.(dumper)
	if !isDumper {
		return nil, false, nil
	}
	if g == nil {
		g = &groupGate{rank: rs.rank} // groups learned, none indexed: the tree as it is
	}
	r := rs.rank
	rs.mu.Lock()
	groups := append([]GroupStatus(nil), rs.groups...)
	rs.mu.Unlock()
	groupOf := func(idx uint32) event.Group {
		for _, gs := range groups {
			if gs.Idx == idx {
				return event.Group{Idx: idx, Kind: gs.Kind, SlidingWindow: gs.SlidingWindow, BlockSize: gs.BlockSize}
			}
		}
		return event.Group{Idx: idx, Kind: event.GroupKindFullAttention}
	}
	for _, gs := range groups {
		if gs.Kind != event.GroupKindUnset && !slices.Contains(g.mains, gs.Idx) {
			ev := event.Stored(r, 0, nil)
			ev.HasGroup, ev.Group = true, groupOf(gs.Idx)
			out = append(out, ev)
		}
	}
	for _, idx := range g.mains {
		ev := event.Stored(r, 0, nil)
		ev.HasGroup, ev.Group = true, groupOf(idx)
		out = append(out, ev)
	}
	var lower []event.RouterEvent
	device := uint64(0)
	if err := d.DumpRank(r, func(ev *event.RouterEvent) error {
		c := ev.Clone()
		if c.Tier != event.TierDevice {
			lower = append(lower, c)
			return nil
		}
		device += uint64(len(c.Blocks))
		if !g.multi && len(g.mains) == 1 {
			c.HasGroup, c.Group = true, groupOf(g.mains[0])
			out = append(out, c)
		}
		return nil
	}); err != nil {
		return nil, false, err
	}
	if held := d.TierBlocks(r)[event.TierDevice]; held != device {
		return nil, false, nil
	}
	if g.multi {
		for i, idx := range g.mains {
			evs, expressible := g.groupEvents(uint64(1)<<i, groupOf(idx))
			if !expressible {
				return nil, false, nil
			}
			out = append(out, evs...)
		}
	}
	return append(out, lower...), true, nil
}

// groupEvents returns the Stored events of the blocks group bit b holds, each parent first (a
// chain per event); expressible is false when the group holds a block whose parent it does not.
func (g *groupGate) groupEvents(b uint64, grp event.Group) (out []event.RouterEvent, expressible bool) {
	held := 0
	var roots []uint64
	for h, e := range g.blocks {
		if e.mask&b == 0 {
			continue
		}
		held++
		if e.orphan {
			return nil, false
		}
		if !e.hasParent {
			roots = append(roots, h)
		} else if p := g.blocks[e.parent]; p == nil || p.mask&b == 0 {
			return nil, false
		}
	}
	sort.Slice(roots, func(i, j int) bool { return roots[i] < roots[j] }) // a deterministic dump
	emitted := 0
	stack := roots
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		e := g.blocks[x]
		var parent *uint64
		if e.hasParent {
			v := e.parent
			parent = &v
		}
		var chain []event.Block
		for e != nil {
			chain = append(chain, event.Block{BlockHash: x, TokensHash: e.tokens})
			var next *gateBlock
			for _, k := range g.kids[x] {
				ke := g.blocks[k]
				if ke == nil || ke.mask&b == 0 {
					continue
				}
				if next == nil {
					next, x = ke, k
				} else {
					stack = append(stack, k)
				}
			}
			e = next
		}
		emitted += len(chain)
		ev := event.Stored(g.rank, 0, parent, chain...)
		ev.HasGroup, ev.Group = true, grp
		out = append(out, ev)
	}
	return out, emitted == held
}

// hasGroups reports whether the rank learned KV-cache groups or gates its tree by them: its
// snapshots are then written by groupDump. Applier (or the decider with the pipeline drained).
func (rs *rankState) hasGroups() bool {
	if rs.gate != nil {
		return true
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return len(rs.groups) > 0
}

// foldGroups is retention for a rank with group state (hasGroups): its state at upTo is rebuilt
// from its snapshot and log through a scratch gate and written as a snapshot of groupDump's
// events, and the log prefix is deleted. An already newer snapshot only trims the log, as
// recovery.Fold does. Caller: the rank's lane, the pipeline drained.
func (p *Pipeline) foldGroups(ctx context.Context, rs *rankState, upTo uint64) error {
	r := rs.rank
	meta, err := p.log.RankMeta(r)
	if err != nil {
		return err
	}
	if meta.SnapshotID != 0 && meta.SnapshotID >= upTo {
		return recovery.Fold(ctx, p.log, r, upTo) // trims the log only
	}
	scratch := &rankState{rank: r}
	st := tier.New(nil)
	rep, err := recovery.ReplayRank(ctx, p.log, gatedTree{ks: p.kindsNow(r), rs: scratch, t: st}, r, upTo)
	if err != nil {
		return err
	}
	if rep.Damaged != nil {
		return fmt.Errorf("lanes: fold of rank %v: %w", r, rep.Damaged)
	}
	if !scratch.hasGroups() {
		return recovery.Fold(ctx, p.log, r, upTo) // no group state at the cut
	}
	evs, ok, err := groupDump(scratch, st)
	if err != nil {
		return err
	}
	if !ok {
		held := st.TierBlocks(r)[event.TierDevice]
		return &recovery.NotFoldableError{Rank: r, UpTo: upTo, Held: held, Reachable: uint64(max(0, countDevice(evs)))}
	}
	return p.log.WriteSnapshot(ctx, r, upTo, evs)
}

func countDevice(evs []event.RouterEvent) int {
	n := 0
	for i := range evs {
		if evs[i].Tier == event.TierDevice {
			n += len(evs[i].Blocks)
		}
	}
	return n
}

// Fold is recovery.Fold for a rank that may have KV-cache groups (the offline compact): a rank
// with groups is folded as online retention folds it (its snapshot keeps each indexed group's
// blocks, tagged), any other as recovery.Fold does. indexed: the kinds the server indexes
// (default event.MainGroupKinds).
func Fold(ctx context.Context, log *wal.Log, r event.Rank, upTo uint64, indexed event.GroupKinds) error {
	p := &Pipeline{opts: Options{IndexedKinds: event.GroupKinds(offlineKinds(indexed))}, log: log}
	return p.foldGroups(ctx, &rankState{rank: r}, upTo)
}

// ReplayGroups is recovery.ReplayRank through a KV-cache group gate (the one the lanes apply
// with, indexing the kinds of indexed, default event.MainGroupKinds): the offline tools rebuild
// a rank of several main groups to the tree the server holds, not to the union of its groups.
func ReplayGroups(ctx context.Context, log *wal.Log, t Tree, r event.Rank, upTo uint64, indexed event.GroupKinds) (recovery.Replayed, error) {
	return recovery.ReplayRank(ctx, log, gatedTree{ks: offlineKinds(indexed), rs: &rankState{rank: r}, t: t}, r, upTo)
}

// GroupTree returns t behind a fresh KV-cache group gate for rank r (indexing the kinds of
// indexed, default event.MainGroupKinds): the offline tools apply a rank's snapshot and log
// through it to rebuild the tree the server holds.
func GroupTree(t Tree, r event.Rank, indexed event.GroupKinds) recovery.Tree {
	return gatedTree{ks: offlineKinds(indexed), rs: &rankState{rank: r}, t: t}
}

// GroupSnapshot reports whether a snapshot's events were written for a rank with KV-cache
// groups (groupDump): they rebuild its state through GroupTree, not as a plain dump.
func GroupSnapshot(evs []event.RouterEvent) bool {
	for i := range evs {
		if evs[i].HasGroup {
			return true
		}
	}
	return false
}

// Regroup rebuilds every rank of worker from its snapshot and log, on the rank's lane with its
// pipeline drained, after the kinds it indexes (Options.KindsOf) changed: the rank then holds
// what a restart with the new setting would rebuild. Events logged while a kind was not
// indexed were logged without their blocks and stay so: a kind indexed anew holds only the
// blocks its group stores from now on (with two or more indexed groups the rank's score is 0
// until the group stored them again: an under-count, never an over-count); a kind no more
// indexed leaves the gate at once. The rank gets a new Incarnation.
func (p *Pipeline) Regroup(ctx context.Context, workerID uint64) error {
	for _, rs := range p.ranksOf(workerID) {
		var rerr error
		err := p.Do(ctx, rs.rank, func() { rerr = p.regroupRank(ctx, rs) })
		if errors.Is(err, ErrUnknownRank) {
			continue // removed or never written: nothing to rebuild
		}
		if err == nil {
			err = rerr
		}
		if err != nil {
			return fmt.Errorf("lanes: regrouping rank %v: %w", rs.rank, err)
		}
	}
	return nil
}

// regroupRank is Regroup for one rank, on its lane, the pipeline drained.
func (p *Pipeline) regroupRank(ctx context.Context, rs *rankState) error {
	r := rs.rank
	t := p.ix(r)
	t.ClearRank(r)
	rs.resetGate(false)
	ks := p.kindsNow(r)
	rep, err := recovery.ReplayRank(ctx, p.log, gatedTree{ks: ks, rs: rs, t: t}, r, 0)
	if err != nil {
		return err
	}
	if rep.Damaged != nil {
		p.lg.Warn("regroup: the rank's snapshot is damaged; rebuilt from its log", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "err", rep.Damaged)
	}
	rs.mu.Lock()
	for i := range rs.groups {
		rs.groups[i].Indexed = indexedBy(ks, r, rs.groups[i].Kind)
	}
	rs.incarnation = p.incarnations.Add(1)
	rs.mu.Unlock()
	p.lg.Info("rank rebuilt for its indexed KV-cache group kinds", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "kinds", event.GroupKinds(ks).Names())
	return nil
}
