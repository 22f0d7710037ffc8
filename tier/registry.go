package tier

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/kvindex/kvindex/event"
)

// rankKey names a rank within a partition (a Tiers is one partition's).
type rankKey struct {
	worker uint64
	dp     uint32
}

func keyOf(r event.Rank) rankKey { return rankKey{r.WorkerID, r.DPRank} }

// rankEntry is one rank known to the lower tiers of a partition. own is owned by the rank's
// writer; blocks is read by anyone.
type rankEntry struct {
	rank   event.Rank
	id     uint32
	own    [numLower]ownSet
	blocks [numLower]atomic.Uint64
}

// registry gives the ranks of a partition's lower tiers dense ids, shared by the three tiers so
// that a query maps a rank to its id once. Ids are never reused (a reader holding an old id never
// attributes a hit to another rank). view is immutable and replaced under mu, so readers and
// writers look ranks up without a lock; registering or removing a rank copies it (O(ranks),
// rare next to events and queries).
type registry struct {
	mu   sync.Mutex
	view atomic.Pointer[regView]
}

type regView struct {
	ids  map[rankKey]uint32
	byID []*rankEntry // nil once removed
}

func newRegistry() *registry {
	r := &registry{}
	r.view.Store(&regView{ids: map[rankKey]uint32{}})
	return r
}

// get returns r's entry, or nil.
func (g *registry) get(r event.Rank) *rankEntry {
	v := g.view.Load()
	if id, ok := v.ids[keyOf(r)]; ok {
		return v.byID[id]
	}
	return nil
}

// ensure returns r's entry, registering it when unknown.
func (g *registry) ensure(r event.Rank) *rankEntry {
	if e := g.get(r); e != nil {
		return e
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	v := g.view.Load()
	if id, ok := v.ids[keyOf(r)]; ok {
		return v.byID[id]
	}
	e := &rankEntry{rank: r, id: uint32(len(v.byID))}
	n := &regView{ids: maps.Clone(v.ids), byID: append(v.byID[:len(v.byID):len(v.byID)], e)}
	n.ids[keyOf(r)] = e.id
	g.view.Store(n)
	return e
}

// remove forgets r (its id is not reused).
func (g *registry) remove(r event.Rank) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v := g.view.Load()
	id, ok := v.ids[keyOf(r)]
	if !ok {
		return
	}
	n := &regView{ids: maps.Clone(v.ids), byID: append([]*rankEntry(nil), v.byID...)}
	delete(n.ids, keyOf(r))
	n.byID[id] = nil
	g.view.Store(n)
}
