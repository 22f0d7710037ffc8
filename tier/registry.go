package tier

import (
	"slices"
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
// attributes a hit to another rank). view is immutable and replaced under mu, and ids (rank →
// entry) is a sync.Map, so writers and queries look ranks up without a lock. Registering a rank
// appends to the newest view's byID array (no older view reads past its length) and adds one
// key, so a fleet of R ranks registers in O(R), not the O(R²) of copying both at each; removing
// one copies byID (rare). A reader that finds an entry checks its id against the view it
// loaded (lookup).
type registry struct {
	mu   sync.Mutex
	ids  sync.Map // rankKey → *rankEntry
	view atomic.Pointer[regView]
}

type regView struct {
	byID []*rankEntry // nil once removed
}

func newRegistry() *registry {
	r := &registry{}
	r.view.Store(&regView{})
	return r
}

// get returns r's entry, or nil.
func (g *registry) get(r event.Rank) *rankEntry {
	if e, ok := g.ids.Load(keyOf(r)); ok {
		return e.(*rankEntry)
	}
	return nil
}

// lookup returns the id of rank k in view v, or false when v does not know it (unknown, removed,
// or registered after v).
func (g *registry) lookup(v *regView, k rankKey) (uint32, bool) {
	e, ok := g.ids.Load(k)
	if !ok {
		return 0, false
	}
	id := e.(*rankEntry).id
	return id, int(id) < len(v.byID) && v.byID[id] != nil
}

// ensure returns r's entry, registering it when unknown.
func (g *registry) ensure(r event.Rank) *rankEntry {
	if e := g.get(r); e != nil {
		return e
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.get(r); e != nil {
		return e
	}
	v := g.view.Load()
	e := &rankEntry{rank: r, id: uint32(len(v.byID))}
	g.view.Store(&regView{byID: append(v.byID, e)})
	g.ids.Store(keyOf(r), e)
	return e
}

// remove forgets r (its id is not reused).
func (g *registry) remove(r event.Rank) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.get(r)
	if e == nil {
		return
	}
	n := &regView{byID: slices.Clone(g.view.Load().byID)}
	n.byID[e.id] = nil
	g.view.Store(n)
	g.ids.Delete(keyOf(r))
}
