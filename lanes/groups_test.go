package lanes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/groupgate"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
	"pgregory.net/rapid"
)

// groupRank is the rank of the group scripts.
var groupRank = event.Rank{WorkerID: 7}

// groupEvent builds a Stored or Removed of groupRank for the scripts: "group=G kind=K window=W"
// (kind "-" or absent with group: the group only; no group: no metadata).
func groupEvent(t *testing.T, d *datadriven.TestData, id uint64) event.RouterEvent {
	var ev event.RouterEvent
	hashes := func(key string) []uint64 {
		var out []uint64
		for _, a := range d.CmdArgs {
			if a.Key == key {
				out = append(out, parseHashes(t, a.Vals)...)
			}
		}
		return out
	}
	switch d.Cmd {
	case "store":
		var blocks []event.Block
		for _, h := range hashes("blocks") {
			blocks = append(blocks, blk(h))
		}
		var parent *uint64
		if p := hashes("parent"); len(p) == 1 {
			parent = &p[0]
		}
		if th := hashes("tokens"); len(th) == len(blocks) {
			for i := range blocks {
				blocks[i].TokensHash = th[i] // a hash of other tokens (a Mamba chunk)
			}
		}
		ev = event.Stored(groupRank, id, parent, blocks...)
	case "remove":
		ev = event.Removed(groupRank, id, hashes("blocks")...)
	}
	if d.HasArg("group") {
		var g, w uint64
		d.ScanArgs(t, "group", &g)
		if d.HasArg("window") {
			d.ScanArgs(t, "window", &w)
		}
		kind := "-"
		if d.HasArg("kind") {
			d.ScanArgs(t, "kind", &kind)
		}
		k := event.GroupKindUnset
		if kind != "-" {
			k, _ = event.ParseGroupKind(kind)
		}
		ev.HasGroup, ev.Group = true, event.Group{Idx: uint32(g), Kind: k, SlidingWindow: uint32(w), BlockSize: 4}
	}
	return ev
}

// parseHashes reads "1,2,3" (or the values of key=(1,2,3)).
func parseHashes(t *testing.T, vals []string) []uint64 {
	var out []uint64
	for _, v := range vals {
		for _, x := range strings.Split(v, ",") {
			h, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, h)
		}
	}
	return out
}

// scoreOf is groupRank's score for the chain of block hashes q (their tokens hashes, blk).
func scoreOf(ix *index.Index, q []uint64) (score uint32, size uint64) {
	return scoreOfRank(ix, groupRank, q)
}

// scoreOfRank is scoreOf for rank r (an index is one partition's: its scores name no partition).
func scoreOfRank(ix *index.Index, r event.Rank, q []uint64) (score uint32, size uint64) {
	local := make([]uint64, len(q))
	for i, h := range q {
		local[i] = blk(h).TokensHash
	}
	for _, s := range ix.FindMatches(local, false) {
		if s.WorkerID == r.WorkerID && s.DPRank == r.DPRank {
			return s.Score, s.TreeSize
		}
	}
	return 0, 0
}

func formatGroups(gs []GroupStatus) string {
	var b strings.Builder
	for _, g := range gs {
		fmt.Fprintf(&b, "group %d kind=%s block_size=%d window=%d indexed=%t events=%d ignored=%d\n",
			g.Idx, g.Kind, g.BlockSize, g.SlidingWindow, g.Indexed, g.Events, g.Ignored)
	}
	if b.Len() == 0 {
		return "no groups\n"
	}
	return b.String()
}

// TestGroups runs testdata/groups: KV-cache groups of hybrid models on one rank.
//
//	store [group=G kind=K window=W] [parent=P] blocks=B,... [tokens=T,...]   one event (ids
//	                  from 1); a block's tokens hash is B+1000 unless tokens says otherwise
//	remove [group=G kind=K] blocks=B,...
//	clear
//	score q=B,...     the rank's score and tree size for the chain q
//	groups            the rank's groups (RankStatus.Groups) and the ignored counts by kind
//	restart           close and reopen the data dir (replay)
//	indexed kinds=K,...  (first command only) Options.IndexedKinds
//	rank-kinds kinds=K,...|-  what Options.KindsOf answers for the rank from now on (- : 0, the
//	                  server's); the running pipeline learns it at regroup or restart
//	regroup           Pipeline.Regroup of the rank's worker
func TestGroups(t *testing.T) {
	datadriven.Walk(t, "testdata/groups", func(t *testing.T, path string) {
		fs := vfs.NewMem()
		var f *fixture
		var opts Options
		var rankKinds atomic.Uint64
		opts.KindsOf = func(r event.Rank) event.GroupKinds {
			if r != groupRank {
				return 0
			}
			return event.GroupKinds(rankKinds.Load())
		}
		ignored := map[event.GroupKind]int{}
		opts.Listener.GroupIgnored = func(_ event.Rank, k event.GroupKind, _ int) { ignored[k]++ }
		id := uint64(0)
		defer func() {
			if f != nil {
				f.close()
			}
		}()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "indexed" {
				var names []string
				for _, a := range d.CmdArgs {
					if a.Key == "kinds" {
						for _, v := range a.Vals {
							names = append(names, strings.Split(v, ",")...)
						}
					}
				}
				ks, err := event.ParseGroupKinds(names)
				if err != nil {
					return err.Error() + "\n"
				}
				opts.IndexedKinds = ks
				return ""
			}
			if d.Cmd == "rank-kinds" {
				var names []string
				for _, a := range d.CmdArgs {
					if a.Key == "kinds" && a.Vals[0] != "-" {
						for _, v := range a.Vals {
							names = append(names, strings.Split(v, ",")...)
						}
					}
				}
				ks, err := event.ParseGroupKinds(names)
				if err != nil {
					return err.Error() + "\n"
				}
				rankKinds.Store(uint64(ks))
				return ""
			}
			if f == nil {
				f = open(t, fs, opts)
			}
			switch d.Cmd {
			case "regroup":
				if err := f.p.Regroup(context.Background(), groupRank.WorkerID); err != nil {
					return err.Error() + "\n"
				}
				return ""

			case "store", "remove":
				id++
				f.submit(groupEvent(t, d, id))
				return ""
			case "clear":
				id++
				f.submit(event.Cleared(groupRank, id))
				return ""
			case "score":
				var q []uint64
				for _, a := range d.CmdArgs {
					if a.Key == "q" {
						q = parseHashes(t, a.Vals)
					}
				}
				s, n := scoreOf(f.ix, q)
				return fmt.Sprintf("score=%d tree_size=%d\n", s, n)
			case "groups":
				st, _ := f.p.RankStatus(groupRank)
				out := formatGroups(st.Groups)
				for _, k := range []event.GroupKind{event.GroupKindSlidingWindow, event.GroupKindSlidingWindowMLA,
					event.GroupKindMamba, event.GroupKindOther, event.GroupKindFullAttention} {
					if ignored[k] > 0 {
						out += fmt.Sprintf("ignored_group_events{kind=%s} %d\n", k, ignored[k])
					}
				}
				return out
			case "restart":
				f.close()
				f = open(t, fs, opts)
				return ""
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

// groupsRef is the reference model of a rank's KV-cache groups: per indexed group the blocks it
// holds (a store needs its parent held by the same group), and the indexed groups in the order of
// their first event. A block counts while every one of them holds it.
type groupsRef struct {
	held  map[uint32]map[uint64]bool
	mains []uint32
	first map[uint32]uint64 // the id of each group's first event
	// orphan: blocks the first group held stranded (below a block it dropped) when a second
	// group came: still held, but with a parent the gate cannot know until some group stores
	// them again, so they hold back every chain through them until then.
	orphan map[uint64]bool
}

// refParent is the parent of block h in the test's universe of blocks 1..15: a binary tree
// under block 1, which hangs under the root.
func refParent(h uint64) (uint64, bool) { return h / 2, h >= 2 }

func (m *groupsRef) isMain(g uint32) bool {
	for _, x := range m.mains {
		if x == g {
			return true
		}
	}
	return false
}

// register makes g a main group on its first event.
func (m *groupsRef) register(g uint32) {
	if !m.isMain(g) {
		m.mains = append(m.mains, g)
		if len(m.mains) == 2 {
			// Becoming a rank of several groups, the first group's blocks are read from the
			// tree's dump: blocks it holds below a block it dropped are not expressible there,
			// and are orphans until a group stores them again.
			first := m.held[m.mains[0]]
			for h := range first {
				for p, ok := refParent(h); ok; p, ok = refParent(p) {
					if !first[p] {
						if m.orphan == nil {
							m.orphan = map[uint64]bool{}
						}
						m.orphan[h] = true
						break
					}
				}
			}
		}
	}
}

func (m *groupsRef) store(g uint32, parent *uint64, blocks []uint64) {
	m.register(g)
	if parent != nil && !m.held[g][*parent] {
		return
	}
	for _, h := range blocks {
		m.held[g][h] = true
		delete(m.orphan, h) // stored again: its parent is known
	}
}

// remove applies group g's Removed of blocks.
func (m *groupsRef) remove(g uint32, blocks []uint64) {
	m.register(g)
	for _, h := range blocks {
		if m.held[g][h] && len(m.mains) > 0 && m.mains[0] == g {
			delete(m.orphan, h) // the first group let go of its stranded hold
		}
		delete(m.held[g], h)
	}
}

// treeSize is the blocks the rank's tree holds: the one main group's, or with several the
// blocks every main group holds along their whole chain.
func (m *groupsRef) treeSize() uint64 {
	switch len(m.mains) {
	case 0:
		return 0
	case 1:
		return uint64(len(m.held[m.mains[0]]))
	}
	n := uint64(0)
	for h := uint64(1); h <= 15; h++ {
		var c []uint64
		for x, ok := h, true; ok; x, ok = refParent(x) {
			c = append(c, x)
		}
		if m.score(c) == uint32(len(c)) {
			n++
		}
	}
	return n
}

// score is the longest prefix of the chain q every main group holds.
func (m *groupsRef) score(q []uint64) uint32 {
	if len(m.mains) == 0 {
		return 0
	}
	n := uint32(0)
	for _, h := range q {
		for _, g := range m.mains {
			if !m.held[g][h] || m.orphan[h] {
				return n
			}
		}
		n++
	}
	return n
}

// TestGroupsMatchReference drives random per-group streams (stores, window evictions, main-group
// evictions, clears) of up to four groups of random kinds, and checks after every event, and
// after a restart, that the rank's score for every chain of the universe is the prefix all its
// main groups hold.
func TestGroupsMatchReference(t *testing.T) {
	kinds := []event.GroupKind{event.GroupKindFullAttention, event.GroupKindMLAAttention,
		event.GroupKindSlidingWindow, event.GroupKindMamba}
	var chains [][]uint64 // root paths to every block of the universe
	for h := uint64(1); h <= 15; h++ {
		var c []uint64
		for x, ok := h, true; ok; x, ok = refParent(x) {
			c = append([]uint64{x}, c...)
		}
		chains = append(chains, c)
	}
	rapid.Check(t, func(rt *rapid.T) {
		ngroups := rapid.IntRange(1, 4).Draw(rt, "groups")
		gk := make([]event.GroupKind, ngroups)
		ref := &groupsRef{held: map[uint32]map[uint64]bool{}}
		for g := range gk {
			gk[g] = rapid.SampledFrom(kinds).Draw(rt, fmt.Sprintf("kind%d", g))
			if event.MainGroupKinds.Has(gk[g]) {
				ref.held[uint32(g)] = map[uint64]bool{}
			}
		}
		// Online retention and checkpoints write snapshots of the group state the restarts
		// below read back.
		opts := Options{Lanes: 1, RetainEvents: uint64(rapid.SampledFrom([]int{0, 2, 5}).Draw(rt, "retain")),
			CheckpointRatio: rapid.SampledFrom([]float64{0, 0.5}).Draw(rt, "checkpointRatio"), CheckpointMinBlocks: 1}
		f := open(t, vfs.NewMem(), opts)
		defer func() { f.close() }()
		check := func(when string) {
			for _, c := range chains {
				want := ref.score(c)
				got, size := scoreOf(f.ix, c)
				if got != want {
					rt.Fatalf("%s: chain %v: score %d, reference %d (groups %v, mains %v)", when, c, got, want, gk, ref.mains)
				}
				if got > 0 && size != ref.treeSize() {
					rt.Fatalf("%s: tree size %d, reference %d (groups %v, mains %v)", when, size, ref.treeSize(), gk, ref.mains)
				}
			}
		}
		nops := rapid.IntRange(1, 40).Draw(rt, "ops")
		for id := uint64(1); id <= uint64(nops); id++ {
			g := uint32(rapid.IntRange(0, ngroups-1).Draw(rt, "group"))
			grp := event.Group{Idx: g, Kind: gk[g], BlockSize: 4}
			var ev event.RouterEvent
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); {
			case op < 6: // a store of a chain down the universe
				x := rapid.Uint64Range(1, 15).Draw(rt, "from")
				var blocks []event.Block
				var hs []uint64
				for h := x; h <= 15 && len(hs) < rapid.IntRange(1, 4).Draw(rt, "len"); h = 2*h + uint64(rapid.IntRange(0, 1).Draw(rt, "child")) {
					blocks, hs = append(blocks, blk(h)), append(hs, h)
				}
				var parent *uint64
				if p, ok := refParent(x); ok {
					parent = &p
				}
				ev = event.Stored(groupRank, id, parent, blocks...)
				if ref.held[g] != nil {
					ref.store(g, parent, hs)
				}
			case op < 9: // an eviction (a window's or a main group's)
				hs := rapid.SliceOfN(rapid.Uint64Range(1, 15), 1, 4).Draw(rt, "removed")
				ev = event.Removed(groupRank, id, hs...)
				if rapid.Bool().Draw(rt, "kindless") {
					grp.Kind = event.GroupKindUnset // the group only: its learned kind
				}
				if ref.held[g] != nil {
					ref.remove(g, hs)
				}
			default:
				ev = event.Cleared(groupRank, id)
				for _, held := range ref.held {
					clear(held)
				}
				clear(ref.orphan)
			}
			if ev.Kind != event.KindCleared {
				if grp.Kind == event.GroupKindUnset && !ref.seen(g, id, ev) {
					grp.Kind = gk[g] // a group's first event names its kind
				}
				ev.HasGroup, ev.Group = true, grp
			}
			f.submit(ev)
			check(fmt.Sprintf("after event %d (%v group %d)", id, ev.Kind, g))
			if rapid.IntRange(0, 9).Draw(rt, "restart") == 0 {
				f.close()
				f = open(t, f.fs, opts)
				check(fmt.Sprintf("after a restart at event %d", id))
			}
		}
		f.close()
		f = open(t, f.fs, opts)
		check("after restart")
	})
}

// seen reports whether group g had an event before (the model keeps no more than that: the
// first event of every group in the stream names its kind).
func (m *groupsRef) seen(g uint32, id uint64, _ event.RouterEvent) bool {
	if m.first == nil {
		m.first = map[uint32]uint64{}
	}
	if f, ok := m.first[g]; ok && f < id {
		return true
	}
	m.first[g] = id
	return false
}

// TestFormat2DirIndexesAsToday: a data dir of the last format before groups (testdata/format2)
// is upgraded in place and replays as streams without group metadata; a rank then learns its
// groups from new events, and a restart reproduces both.
func TestFormat2DirIndexesAsToday(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS("../testdata/format2/datadir")); err != nil {
		t.Fatal(err)
	}
	chain := make([]uint64, 12)
	for i := range chain {
		chain[i] = uint64(i + 1) // tokens hashes 1..12
	}
	w1 := event.Rank{WorkerID: 1}
	for round := 0; round < 2; round++ {
		st, err := store.Open(dir, store.Options{Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		lg, err := wal.Open(st, wal.Options{Durability: wal.Sync, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		ix := index.New(index.Options{})
		p := New(lg, Single(tier.New(ix)), Options{Logger: quiet()})
		if err := p.Replay(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		p.Start()
		score := func(q []uint64) uint32 {
			for _, s := range ix.FindMatches(q, false) {
				if s.Rank() == w1 {
					return s.Score
				}
			}
			return 0
		}
		if got := score(chain); got != 12 {
			t.Fatalf("round %d: worker 1 score %d, want 12", round, got)
		}
		if round == 0 {
			// A hybrid publisher takes over worker 1: its Mamba group's store is not indexed.
			mamba := event.Stored(w1, 13, nil, event.Block{BlockHash: 1200, TokensHash: 999})
			mamba.HasGroup, mamba.Group = true, event.Group{Idx: 1, Kind: event.GroupKindMamba}
			if _, err := p.Submit(context.Background(), []event.RouterEvent{mamba}); err != nil {
				t.Fatal(err)
			}
			if got := score(chain); got != 12 {
				t.Fatalf("after a Mamba store: score %d, want 12", got)
			}
		}
		rs, _ := p.RankStatus(w1)
		if len(rs.Groups) != 1 || rs.Groups[0].Kind != event.GroupKindMamba {
			t.Fatalf("round %d: groups %+v", round, rs.Groups)
		}
		if st.Version() != store.FormatV4 { // the log's own upgrade; 4 → 5 is the engine's
			t.Fatalf("format %d", st.Version())
		}
		p.Close()
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGroupKindsChangesNeverOverCount drives random per-group streams of a full-attention, a
// sliding-window and a Mamba group while the rank's indexed kinds change (Options.KindsOf, then
// Regroup or a restart), and checks after every step that the rank's score for every chain of the
// universe is at most the prefix every indexed group truly holds: a changed setting may
// under-count, never over-count.
func TestGroupKindsChangesNeverOverCount(t *testing.T) {
	gk := []event.GroupKind{event.GroupKindFullAttention, event.GroupKindSlidingWindow, event.GroupKindMamba}
	fa := event.GroupKinds(0).With(event.GroupKindFullAttention)
	settings := []event.GroupKinds{fa, fa.With(event.GroupKindSlidingWindow), fa.With(event.GroupKindMamba),
		fa.With(event.GroupKindSlidingWindow).With(event.GroupKindMamba), event.GroupKinds(0).With(event.GroupKindSlidingWindow)}
	var chains [][]uint64
	const universe = 7 // blocks 1..7: small, so that a group often drops what another holds
	for h := uint64(1); h <= universe; h++ {
		var c []uint64
		for x, ok := h, true; ok; x, ok = refParent(x) {
			c = append([]uint64{x}, c...)
		}
		chains = append(chains, c)
	}
	rapid.Check(t, func(rt *rapid.T) {
		var kinds atomic.Uint64
		kinds.Store(uint64(rapid.SampledFrom(settings).Draw(rt, "setting")))
		opts := Options{Lanes: 1, RetainEvents: uint64(rapid.SampledFrom([]int{0, 3}).Draw(rt, "retain")),
			KindsOf: func(event.Rank) event.GroupKinds { return event.GroupKinds(kinds.Load()) }}
		f := open(t, vfs.NewMem(), opts)
		defer func() { f.close() }()
		truth := make([]map[uint64]bool, len(gk)) // what each group holds, whatever is indexed
		for g := range truth {
			truth[g] = map[uint64]bool{}
		}
		reported := make([]bool, len(gk))
		check := func(when string) {
			set := event.GroupKinds(kinds.Load())
			for _, c := range chains {
				bound := uint32(0)
			prefix:
				for _, h := range c {
					for g, k := range gk {
						if set.Has(k) && reported[g] && !truth[g][h] {
							break prefix
						}
					}
					bound++
				}
				if got, _ := scoreOf(f.ix, c); got > bound {
					rt.Fatalf("%s: chain %v: score %d over the %d every indexed group holds (kinds %v)", when, c, got, bound, set.Names())
				}
			}
		}
		nops := rapid.IntRange(1, 40).Draw(rt, "ops")
		for id := uint64(1); id <= uint64(nops); id++ {
			g := rapid.IntRange(0, len(gk)-1).Draw(rt, "group")
			var ev event.RouterEvent
			switch op := rapid.IntRange(0, 12).Draw(rt, "op"); {
			case op < 5:
				x := rapid.Uint64Range(1, universe).Draw(rt, "from")
				var blocks []event.Block
				var hs []uint64
				for h := x; h <= universe && len(hs) < rapid.IntRange(1, 4).Draw(rt, "len"); h = 2*h + uint64(rapid.IntRange(0, 1).Draw(rt, "child")) {
					blocks, hs = append(blocks, blk(h)), append(hs, h)
				}
				var parent *uint64
				if p, ok := refParent(x); ok {
					parent = &p
				}
				ev = event.Stored(groupRank, id, parent, blocks...)
				if parent == nil || truth[g][*parent] { // a store needs its parent in its group
					for _, h := range hs {
						truth[g][h] = true
					}
				}
			case op < 8:
				hs := rapid.SliceOfN(rapid.Uint64Range(1, universe), 1, 3).Draw(rt, "removed")
				ev = event.Removed(groupRank, id, hs...)
				for _, h := range hs {
					delete(truth[g], h)
				}
			case op < 9:
				ev = event.Cleared(groupRank, id)
				for _, held := range truth {
					clear(held)
				}
			default: // the setting changes: the running pipeline rebuilds the rank, or a restart does
				id--
				kinds.Store(uint64(rapid.SampledFrom(settings).Draw(rt, "setting")))
				if rapid.Bool().Draw(rt, "restart") {
					f.close()
					f = open(t, f.fs, opts)
				} else if err := f.p.Regroup(context.Background(), groupRank.WorkerID); err != nil {
					rt.Fatal(err)
				}
				check(fmt.Sprintf("after the setting changed to %v", event.GroupKinds(kinds.Load()).Names()))
				continue
			}
			if ev.Kind != event.KindCleared {
				ev.HasGroup, ev.Group = true, event.Group{Idx: uint32(g), Kind: gk[g], BlockSize: 4}
				reported[g] = true
			}
			f.submit(ev)
			check(fmt.Sprintf("after event %d (%v group %d)", id, ev.Kind, g))
		}
	})
}

// TestFoldSeesOneSetting changes a rank's indexed kinds (Options.KindsOf) at every point of a
// retention fold — before its first question, between its replay and its dump, after it — for a
// rank of the default partition and one of another, and restarts under the new setting: the
// fold must build its snapshot under one setting, or a sliding-window group that was not
// indexed when the fold began is missing from the snapshot, and the restart indexes the
// full-attention group alone (an over-count; the flake CI found in
// TestGroupKindsChangesNeverOverCount).
func TestFoldSeesOneSetting(t *testing.T) {
	fa := event.GroupKinds(0).With(event.GroupKindFullAttention)
	both := fa.With(event.GroupKindSlidingWindow)
	sw := event.Group{Idx: 1, Kind: event.GroupKindSlidingWindow, BlockSize: 4}
	full := event.Group{Idx: 0, Kind: event.GroupKindFullAttention, BlockSize: 4}
	grouped := func(ev event.RouterEvent, g event.Group) event.RouterEvent {
		ev.HasGroup, ev.Group = true, g
		return ev
	}
	for _, r := range []event.Rank{groupRank, {Partition: 3, WorkerID: 7, DPRank: 1}} {
		for flipAfter := int64(0); flipAfter <= 12; flipAfter++ {
			t.Run(fmt.Sprintf("partition=%d/flip=%d", r.Partition, flipAfter), func(t *testing.T) {
				var (
					kinds atomic.Uint64
					armed atomic.Bool
					calls atomic.Int64
				)
				kinds.Store(uint64(fa))
				opts := Options{Lanes: 1, KindsOf: func(event.Rank) event.GroupKinds {
					k := event.GroupKinds(kinds.Load())
					if armed.Load() && calls.Add(1) > flipAfter {
						kinds.Store(uint64(both)) // the setting changes while the fold runs
						armed.Store(false)
					}
					return k
				}}
				f := open(t, vfs.NewMem(), opts)
				f.submit(grouped(event.Stored(r, 1, nil, blk(1)), sw), // logged without blocks: not indexed
					grouped(event.Removed(r, 2, 1), sw),
					grouped(event.Stored(r, 3, nil, blk(1)), full))
				if got, _ := scoreOfRank(f.ix, r, []uint64{1}); got != 1 {
					t.Fatalf("score %d before the fold, want 1 (full attention alone is indexed)", got)
				}
				var ferr error
				if err := f.p.Do(context.Background(), r, func() {
					armed.Store(true)
					ferr = f.p.foldGroups(context.Background(), f.p.lookup(r), 3)
					armed.Store(false)
				}); err != nil || ferr != nil {
					t.Fatal(err, ferr)
				}
				kinds.Store(uint64(both))
				f.close()
				f = open(t, f.fs, opts)
				defer f.close()
				if meta, err := f.log.RankMeta(r); err != nil || meta.SnapshotID != 3 {
					t.Fatalf("snapshot %d, %v: want the fold's snapshot at 3", meta.SnapshotID, err)
				}
				// The sliding-window group removed its block (while not indexed): under both
				// kinds the rank's score is 0.
				if got, _ := scoreOfRank(f.ix, r, []uint64{1}); got != 0 {
					t.Fatalf("score %d after the restart, want 0 (the sliding-window group holds nothing)", got)
				}
			})
		}
	}
}

// TestFoldOfStrandedGroupsSaysWhatIsReachable: a rank with group state that holds a block below
// one it removed cannot be folded; the error (which `kvindex compact` prints) counts the blocks it
// holds and those reachable from the root, not 0.
func TestFoldOfStrandedGroupsSaysWhatIsReachable(t *testing.T) {
	full := event.Group{Idx: 0, Kind: event.GroupKindFullAttention, BlockSize: 4}
	grouped := func(ev event.RouterEvent) event.RouterEvent {
		ev.HasGroup, ev.Group = true, full
		return ev
	}
	f := open(t, vfs.NewMem(), Options{Lanes: 1})
	defer f.close()
	f.submit(grouped(event.Stored(groupRank, 1, nil, blk(1), blk(2), blk(3), blk(4))),
		grouped(event.Removed(groupRank, 2, 3))) // 4 is stranded below the removed 3
	err := groupgate.Fold(context.Background(), f.log, groupRank, 2, groupgate.Offline(0))
	var nf *recovery.NotFoldableError
	if !errors.As(err, &nf) {
		t.Fatalf("fold: %v, want a NotFoldableError", err)
	}
	if nf.Held != 3 || nf.Reachable != 2 {
		t.Fatalf("held %d, reachable %d: want 3 held (1, 2, 4), 2 reachable (1, 2)", nf.Held, nf.Reachable)
	}
}
