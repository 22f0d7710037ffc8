package groupgate

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
)

// Tree is what a gate applies a rank's events to (a partition's trees, lanes.Tree).
type Tree interface {
	Apply(ev *event.RouterEvent) index.Result
}

// Dumper is a Tree that dumps a rank (tier.Tiers): the gate reads the tree's blocks when a rank
// gets its second indexed group, and Dump writes a rank's snapshot from it.
type Dumper interface {
	DumpRank(r event.Rank, fn func(ev *event.RouterEvent) error) error
	TierBlocks(r event.Rank) [4]uint64
}

// GroupStatus is what a rank learned of one of its KV-cache groups (lanes.RankStatus.Groups).
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

// Kinds answers which kinds a rank indexes: the lanes' live setting, or Fixed (one answer kept
// for a whole rebuild).
type Kinds interface {
	KindsOf(r event.Rank) event.GroupKinds
}

// Fixed is one setting, kept for a rebuild of a rank (restart replay, retention, regroup) that
// must see it from its first event to its last: the live setting may answer differently
// meanwhile, and a gate built half under one setting and half under another can hold a block a
// group dropped (an over-count).
type Fixed event.GroupKinds

// KindsOf implements Kinds.
func (k Fixed) KindsOf(event.Rank) event.GroupKinds { return event.GroupKinds(k) }

// Offline is the setting the offline tools rebuild with: indexed, default event.MainGroupKinds.
func Offline(indexed event.GroupKinds) Fixed {
	if indexed == 0 {
		indexed = event.MainGroupKinds
	}
	return Fixed(indexed)
}

// IndexedBy reports whether events of kind k of rank r change the tree under ks's setting.
func IndexedBy(ks Kinds, r event.Rank, k event.GroupKind) bool {
	return k == event.GroupKindUnset || ks.KindsOf(r).Has(k)
}

// State is one rank's KV-cache groups: what it learned of each (by Idx, under its own lock:
// written by the lanes' decider and the replay, read by the status) and the gate of its indexed
// groups (the rank's applier's only). Its zero value is a rank that learned nothing.
type State struct {
	mu     sync.Mutex
	groups []GroupStatus
	gate   *gate
}

// learn records group g in the table, resolves an unset kind from it and returns the group's
// entry. Caller holds s.mu.
func (s *State) learn(g event.Group) *GroupStatus {
	i := sort.Search(len(s.groups), func(i int) bool { return s.groups[i].Idx >= g.Idx })
	if i == len(s.groups) || s.groups[i].Idx != g.Idx {
		s.groups = append(s.groups, GroupStatus{})
		copy(s.groups[i+1:], s.groups[i:])
		s.groups[i] = GroupStatus{Idx: g.Idx}
	}
	gs := &s.groups[i]
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

// Classify (the decider, before an event of group g of rank r is logged) learns g and returns
// its resolved kind, whether ks indexes it, and whether it is the first event of a group of a
// kind kvindex does not know (worth a warning).
func (s *State) Classify(r event.Rank, g event.Group, ks Kinds) (kind event.GroupKind, indexed, firstUnknown bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gs := s.learn(g)
	kind = gs.Kind
	indexed = IndexedBy(ks, r, kind)
	gs.Indexed = indexed
	return kind, indexed, gs.Events == 0 && kind == event.GroupKindOther
}

// Count counts an accepted event of group g (the decider, after its decision); ignored: it was
// logged without its blocks.
func (s *State) Count(g event.Group, ignored bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gs := s.learn(g)
	gs.Events++
	if ignored {
		gs.Ignored++
	}
}

// Groups returns a copy of the groups learned, by Idx.
func (s *State) Groups() []GroupStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]GroupStatus(nil), s.groups...)
}

// Reindex marks which learned groups ks indexes (after a rebuild under a new setting).
func (s *State) Reindex(ks Kinds, r event.Rank) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.groups {
		s.groups[i].Indexed = IndexedBy(ks, r, s.groups[i].Kind)
	}
}

// Apply applies a logged event of rank r to t through the rank's gate, under ks's setting (the
// applier: the lanes' live setting; restart replay and rebuilds: Fixed).
func (s *State) Apply(ks Kinds, r event.Rank, t Tree, ev *event.RouterEvent) index.Result {
	if ev.Kind == event.KindCleared {
		if s.gate != nil {
			s.gate.clear()
		}
		return t.Apply(ev)
	}
	if !ev.HasGroup || ev.Group.Kind == event.GroupKindUnset || ev.Tier != event.TierDevice {
		return t.Apply(ev)
	}
	if !IndexedBy(ks, r, ev.Group.Kind) {
		return index.Result{Status: index.StatusOK} // logged without blocks, or indexed no more
	}
	if s.gate == nil {
		s.gate = &gate{rank: r}
	}
	return s.gate.apply(t, ev)
}

// Reset forgets the rank's group membership (reset, TreeDump install, removal); the groups it
// learned stay, except when forget (removal).
func (s *State) Reset(forget bool) {
	s.gate = nil
	if forget {
		s.mu.Lock()
		s.groups = nil
		s.mu.Unlock()
	}
}

// Gated reports whether the rank's tree is behind a gate (an indexed group reported a block).
// The applier's.
func (s *State) Gated() bool { return s.gate != nil }

// HasGroups reports whether the rank learned KV-cache groups or gates its tree by them: its
// snapshots are then written by Dump. The applier's (or the decider's with the lanes drained).
func (s *State) HasGroups() bool {
	if s.gate != nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.groups) > 0
}

// Replay is rank R's tree T behind the rank's state S, applying a replayed rank's events
// (restart replay, retention, regroup, the offline tools), learning its groups on the way,
// under one setting KS (recovery.Tree).
type Replay struct {
	KS Fixed
	S  *State
	R  event.Rank
	T  Tree
}

// Apply implements recovery.Tree.
func (g Replay) Apply(ev *event.RouterEvent) index.Result {
	if ev.HasGroup && ev.Kind != event.KindCleared {
		g.S.mu.Lock()
		gs := g.S.learn(ev.Group)
		gs.Indexed = IndexedBy(g.KS, g.R, gs.Kind)
		g.S.mu.Unlock()
	}
	return g.S.Apply(g.KS, g.R, g.T, ev)
}

// Reserve passes the replay's size hint on (recovery.ReplayRank).
func (g Replay) Reserve(r event.Rank, n int) {
	if rv, ok := g.T.(interface{ Reserve(event.Rank, int) }); ok {
		rv.Reserve(r, n)
	}
}

// maxGateGroups bounds the indexed groups of one rank the gate tells apart (one bit each).
const maxGateGroups = 64

// gate is one rank's membership of its indexed groups, owned by the rank's applier. With
// one indexed group it only remembers which one; from the second on (multi) it keeps every
// block any indexed group holds, which groups hold it, and whether the tree holds it. The tree
// holds a block exactly when every group holds it and the tree holds its parent (or it hangs
// under the root): the reachable part of the groups' intersection.
type gate struct {
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
func (g *gate) newBlock(v gateBlock) *gateBlock {
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

func (g *gate) full() uint64 { return 1<<len(g.mains) - 1 }

// clear forgets every block (a Cleared: every group dropped everything); the groups stay.
func (g *gate) clear() {
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
func (g *gate) bit(idx uint32) (b uint64, isNew, ok bool) {
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

func (g *gate) apply(t Tree, ev *event.RouterEvent) index.Result {
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
func (g *gate) addGroup(t Tree) {
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
func (g *gate) removeFromTree(t Tree, rm []uint64) {
	if len(rm) > 0 {
		ev := event.Removed(g.rank, 0, rm...)
		t.Apply(&ev)
	}
}

// resetGroup drops every block group bit b holds; the blocks that leave the intersection leave
// the tree with the blocks under them.
func (g *gate) resetGroup(t Tree, b uint64) {
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
func (g *gate) toMulti(t Tree) {
	if !g.multi {
		g.multi = true
		g.blocks = map[uint64]*gateBlock{}
		g.kids = map[uint64][]uint64{}
		if d, ok := t.(Dumper); ok {
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

func (g *gate) parentInTree(e *gateBlock) bool {
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
func (g *gate) store(t Tree, ev *event.RouterEvent, b uint64) index.Result {
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
func (g *gate) enter(t Tree, h uint64) {
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

func (g *gate) eligible(e *gateBlock) bool {
	return e != nil && !e.inTree && e.mask == g.full() && g.parentInTree(e)
}

// remove applies group bit b's Removed: each named block the group holds leaves it; a block that
// leaves the intersection leaves the tree with the blocks under it the tree holds.
func (g *gate) remove(t Tree, ev *event.RouterEvent, b uint64) index.Result {
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
func (g *gate) drop(h uint64, e *gateBlock, b uint64, rm []uint64) []uint64 {
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
func (g *gate) leave(h uint64, rm []uint64) []uint64 {
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
func (g *gate) forget(h uint64, e *gateBlock) {
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

// Dump returns the events that rebuild rank r's state in t (a Dumper) through its gate (replayed by
// Apply, as a snapshot is at restart): an empty Stored for each group the rank learned that
// is not in its gate (so the rank's groups are listed again, and a setting that indexes one of
// them anew registers it holding nothing) and for each group in the gate's order (which
// registers it), then for a rank of one indexed group its tree dump tagged with that group, or,
// with several, each indexed group's own blocks, group by group, each parent before its
// children. Lower-tier events follow untagged. ok is
// false when the state holds blocks no dump can express (a block held below one its group or
// the tree dropped): the caller keeps the log instead, as recovery.Fold does.
func (s *State) Dump(r event.Rank, t Tree) (out []event.RouterEvent, ok bool, err error) {
	g := s.gate
	d, isDumper := t.(Dumper)
	if !isDumper {
		return nil, false, nil
	}
	if g == nil {
		g = &gate{rank: r} // groups learned, none indexed: the tree as it is
	}
	groups := s.Groups()
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
func (g *gate) groupEvents(b uint64, grp event.Group) (out []event.RouterEvent, expressible bool) {
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

// Fold is retention for a rank that may have KV-cache groups (the lanes' retention of a rank with
// group state, the offline compact): its state at upTo is rebuilt from its snapshot and log
// through a scratch gate under ks's setting and written as a snapshot of Dump's events (each
// indexed group's blocks, tagged), and the log prefix is deleted; a rank without group state at
// the cut is folded as recovery.Fold does. An already newer snapshot only trims the log.
// Caller: nothing else writes the rank meanwhile (its lane, drained; a stopped data dir).
func Fold(ctx context.Context, log *wal.Log, r event.Rank, upTo uint64, ks Fixed) error {
	meta, err := log.RankMeta(r)
	if err != nil {
		return err
	}
	if meta.SnapshotID != 0 && meta.SnapshotID >= upTo {
		return recovery.Fold(ctx, log, r, upTo) // trims the log only
	}
	scratch := &State{}
	st := tier.New(nil)
	rep, err := recovery.ReplayRank(ctx, log, Replay{KS: ks, S: scratch, R: r, T: st}, r, upTo)
	if err != nil {
		return err
	}
	if rep.Damaged != nil {
		return fmt.Errorf("groupgate: fold of rank %v: %w", r, rep.Damaged)
	}
	if !scratch.HasGroups() {
		return recovery.WriteFold(ctx, log, r, upTo, st) // no group state at the cut: st is Fold's replay
	}
	evs, ok, err := scratch.Dump(r, st)
	if err != nil {
		return err
	}
	if !ok {
		// What the tree can express: its device blocks whose whole chain it holds.
		reachable := uint64(0)
		if err := st.DumpRank(r, func(ev *event.RouterEvent) error {
			if ev.Tier == event.TierDevice {
				reachable += uint64(len(ev.Blocks))
			}
			return nil
		}); err != nil {
			return err
		}
		held := st.TierBlocks(r)[event.TierDevice]
		return &recovery.NotFoldableError{Rank: r, UpTo: upTo, Held: held, Reachable: reachable}
	}
	return log.WriteSnapshot(ctx, r, upTo, evs)
}

// ReplayRank is recovery.ReplayRank through a fresh gate (the one the lanes apply with,
// indexing the kinds of indexed, default event.MainGroupKinds): the offline tools rebuild a
// rank of several main groups to the tree the server holds, not to the union of its groups.
func ReplayRank(ctx context.Context, log *wal.Log, t Tree, r event.Rank, upTo uint64, indexed event.GroupKinds) (recovery.Replayed, error) {
	return recovery.ReplayRank(ctx, log, NewTree(t, r, indexed), r, upTo)
}

// NewTree returns t behind a fresh gate for rank r (indexing the kinds of indexed, default
// event.MainGroupKinds): the offline tools apply a rank's snapshot and log through it to rebuild
// the tree the server holds.
func NewTree(t Tree, r event.Rank, indexed event.GroupKinds) recovery.Tree {
	return Replay{KS: Offline(indexed), S: &State{}, R: r, T: t}
}

// IsSnapshot reports whether a snapshot's events were written for a rank with KV-cache groups
// (Dump): they rebuild its state through NewTree, not as a plain dump.
func IsSnapshot(evs []event.RouterEvent) bool {
	for i := range evs {
		if evs[i].HasGroup {
			return true
		}
	}
	return false
}
