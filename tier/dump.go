package tier

import (
	"cmp"
	"slices"

	"github.com/kvindex/kvindex/event"
)

// DumpRank calls fn with r's blocks in every tier as Stored events, each tagged with its tier:
// first the tree's dump (index.DumpRank), then host_pinned, disk and external, EventID contiguous
// from 0 over all of them. The event passed to fn is only valid during the call; an error from fn
// stops the dump and is returned. Replaying the dump into an empty partition (ReplaceRank, or
// posting it as events) reproduces every tier of r.
//
// A lower tier's edges are written as chains: an edge whose parent is the child of another edge
// of r hangs under it, a chain of single children is one event (siblings by tokens hash); edges
// that no chain from the root or from a foreign parent reaches (a cycle of parents) follow one
// event each. Every edge r holds is expressible, so a tier's dump is exact.
//
// Call it from the rank's writer, or when no writer runs on r.
func (t *Tiers) DumpRank(r event.Rank, fn func(ev *event.RouterEvent) error) error {
	var next uint64
	err := t.Device.DumpRank(r, func(ev *event.RouterEvent) error {
		next = ev.EventID + 1
		return fn(ev)
	})
	if err != nil {
		return err
	}
	re := t.reg.get(r)
	if re == nil {
		return nil
	}
	for i, lx := range t.lower {
		if err := dumpTier(r, lx.tier, &re.own[i], &next, fn); err != nil {
			return err
		}
	}
	return nil
}

func dumpTier(r event.Rank, tr event.Tier, own *ownSet, next *uint64, fn func(ev *event.RouterEvent) error) error {
	if own.n == 0 {
		return nil
	}
	edges := own.all()
	byChild := make(map[uint64]*edge, len(edges))
	for _, e := range edges {
		byChild[e.child] = e
	}
	kids := make(map[uint64][]*edge) // parent block hash → r's edges under it
	var heads []*edge                // under the root, or under a block r does not hold here
	for _, e := range edges {
		if _, ok := byChild[e.parent]; !e.root && ok {
			kids[e.parent] = append(kids[e.parent], e)
		} else {
			heads = append(heads, e)
		}
	}
	order := func(a, b *edge) int {
		if a.root != b.root {
			if a.root {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(a.parent, b.parent); c != 0 {
			return c
		}
		return cmp.Compare(a.tokens, b.tokens)
	}
	slices.SortFunc(heads, order)
	for _, k := range kids {
		slices.SortFunc(k, order)
	}
	ev := event.RouterEvent{Partition: r.Partition, WorkerID: r.WorkerID, DPRank: r.DPRank, Tier: tr, Kind: event.KindStored}
	emit := func(root bool, parent uint64, blocks []event.Block) error {
		ev.HasParent, ev.ParentHash, ev.Blocks, ev.EventID = !root, parent, blocks, *next
		*next++
		return fn(&ev)
	}
	done := make(map[*edge]bool, len(edges))
	var buf []event.Block
	stack := make([]*edge, 0, len(heads))
	walk := func(head *edge) error {
		stack = append(stack[:0], head)
		for len(stack) > 0 {
			e := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			first := e
			buf = buf[:0]
			for {
				done[e] = true
				buf = append(buf, event.Block{BlockHash: e.child, TokensHash: e.tokens})
				if c := kids[e.child]; len(c) == 1 && !done[c[0]] {
					e = c[0]
					continue
				}
				break
			}
			if err := emit(first.root, first.parent, buf); err != nil {
				return err
			}
			c := kids[e.child]
			for i := len(c) - 1; i >= 0; i-- {
				if !done[c[i]] {
					stack = append(stack, c[i])
				}
			}
		}
		return nil
	}
	for _, h := range heads {
		if err := walk(h); err != nil {
			return err
		}
	}
	// Edges on a cycle of parents: no head reaches them.
	var rest []*edge
	for _, e := range edges {
		if !done[e] {
			rest = append(rest, e)
		}
	}
	slices.SortFunc(rest, order)
	for _, e := range rest {
		if done[e] {
			continue
		}
		if err := walk(e); err != nil {
			return err
		}
	}
	return nil
}
