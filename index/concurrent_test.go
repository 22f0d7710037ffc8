package index_test

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/testutil"
)

// TestConcurrentWritersAndReaders runs one writer goroutine per rank (as the lanes do) while
// readers query without pause. The ranks share tokens hashes, so writers contend on shared
// nodes, and remove blocks, so nodes are reclaimed under the readers' feet. Readers check what
// holds at any instant: scores are sorted, positive and within the query. Afterwards the index
// equals a model fed each rank's events in order.
func TestConcurrentWritersAndReaders(t *testing.T) {
	defer index.SetTailFrom(0)() // readers also meet rank tables with a tail
	const (
		writers = 6
		events  = 1500
		readers = 2
	)
	ix := index.New(index.Options{})
	streams := make([][]event.RouterEvent, writers)
	for w := range streams {
		streams[w] = randomStream(rand.New(rand.NewPCG(uint64(w), 7)), event.Rank{WorkerID: uint64(w / 3), DPRank: uint32(w % 3)}, events)
	}
	var done atomic.Bool
	var rwg, wwg sync.WaitGroup
	for i := range readers {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			rng := rand.New(rand.NewPCG(uint64(100+i), 1))
			var dst []index.Score
			q := make([]uint64, 6)
			for n := 0; !done.Load() || n < 100; n++ {
				for j := range q {
					q[j] = 100 + rng.Uint64N(3)
				}
				dst = ix.FindMatchesInto(dst, q, rng.IntN(2) == 0)
				for k, s := range dst {
					if s.Score == 0 || int(s.Score) > len(q) || (k > 0 && dst[k-1].Score < s.Score) {
						t.Errorf("bad answer %v", dst)
						return
					}
				}
				if n%64 == 0 {
					ix.Ranks()
					runtime.Gosched()
				}
			}
		}()
	}
	for w := range writers {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			for i := range streams[w] {
				ix.Apply(&streams[w][i])
			}
		}()
	}
	wwg.Wait()
	done.Store(true)
	rwg.Wait()

	m := testutil.NewModel()
	for w := range streams {
		for i := range streams[w] {
			m.Apply(&streams[w][i])
		}
	}
	checkState(t, ix, m)
	for a := uint64(100); a < 103; a++ {
		for b := uint64(100); b < 103; b++ {
			for c := uint64(100); c < 103; c++ {
				q := []uint64{a, b, c, 100, 101}
				checkScores(t, m, q, false, ix.FindMatches(q, false))
				checkScores(t, m, q, true, ix.FindMatches(q, true))
			}
		}
	}
}

// randomStream returns n events of one rank: chains stored under the root or a block the rank
// holds, removals of held and unknown blocks, and an occasional clear. It tracks what the rank
// holds with its own model.
func randomStream(rng *rand.Rand, r event.Rank, n int) []event.RouterEvent {
	m := testutil.NewModel()
	evs := make([]event.RouterEvent, 0, n)
	for id := uint64(1); len(evs) < n; id++ {
		held := m.HeldBlocks(r)
		var ev event.RouterEvent
		switch k := rng.IntN(20); {
		case k < 12 || len(held) == 0:
			var parent *uint64
			if len(held) > 0 && rng.IntN(3) > 0 {
				p := held[rng.IntN(len(held))]
				parent = &p
			}
			blocks := make([]event.Block, 1+rng.IntN(4))
			for i := range blocks {
				blocks[i] = event.Block{BlockHash: 1 + rng.Uint64N(40), TokensHash: 100 + rng.Uint64N(3)}
			}
			ev = event.Stored(r, id, parent, blocks...)
		case k < 19:
			hs := []uint64{held[rng.IntN(len(held))], 1 + rng.Uint64N(40)}
			ev = event.Removed(r, id, hs...)
		default:
			ev = event.Cleared(r, id)
		}
		m.Apply(&ev)
		evs = append(evs, ev)
	}
	return evs
}

// TestChurnReclaimsEveryNode stores and removes a million blocks and checks that the tree is
// empty afterwards: every node no rank holds is reclaimed, interior ones included.
func TestChurnReclaimsEveryNode(t *testing.T) {
	const total, chain = 1 << 20, 64
	ix := index.New(index.Options{})
	ranks := []event.Rank{{WorkerID: 1}, {WorkerID: 2}, {WorkerID: 2, DPRank: 1}}
	blocks := make([]event.Block, chain)
	hashes := make([]uint64, chain)
	for i := 0; i < total/chain; i++ {
		r := ranks[i%len(ranks)]
		// Chains share their first half with the previous chain's tokens, so nodes are shared
		// across ranks and removal order matters.
		for j := range blocks {
			tok := uint64(i*chain + j)
			if j < chain/2 {
				tok = uint64((i/2)*chain + j)
			}
			blocks[j] = event.Block{BlockHash: uint64(i*chain+j) + 1, TokensHash: tok}
			hashes[j] = blocks[j].BlockHash
		}
		st := event.Stored(r, 0, nil, blocks...)
		if res := ix.Apply(&st); res.Status != index.StatusOK {
			t.Fatalf("store: %v", res.Status)
		}
		// Remove from the root down: interior nodes stay while they have children.
		rm := event.Removed(r, 0, hashes...)
		if i%2 == 1 {
			// Every other chain is removed twice later in two halves, leaves first.
			continue
		}
		if res := ix.Apply(&rm); res.Status != index.StatusOK || res.Blocks != chain {
			t.Fatalf("remove: %+v", res)
		}
	}
	if ix.NodeCount() == 0 {
		t.Fatal("the chains kept for later are gone already")
	}
	for i := 1; i < total/chain; i += 2 {
		r := ranks[i%len(ranks)]
		for j := range hashes {
			hashes[j] = uint64(i*chain+j) + 1
		}
		leaves := event.Removed(r, 0, hashes[chain/2:]...)
		heads := event.Removed(r, 0, hashes[:chain/2]...)
		ix.Apply(&leaves)
		ix.Apply(&heads)
	}
	if n, b := ix.NodeCount(), ix.Blocks(); n != 0 || b != 0 {
		t.Fatalf("after churn: %d nodes, %d blocks; want 0, 0", n, b)
	}
	if c := ix.Counts(); c.Get(event.KindStored, index.StatusOK) != total/chain {
		t.Fatalf("stored ok = %d", c.Get(event.KindStored, index.StatusOK))
	}
}

// TestReusedNodesNeverOverCount churns one rank while readers query, so that unlinked nodes'
// slots are reused under the readers' feet (slab.go): the rank stores a short chain X = [1, 7,
// 7, 7] and a long one Y = [y, 7 × 60] (a fresh y each round), then removes both, thousands of
// times. Every node of Y but its first has the tokens hash of X's later blocks, so a reader
// that went on from a slot of X reused as a node of Y would walk down Y and score more than 4
// on X's path: an over-count. Readers query X's path, 64 blocks long, and check the score.
// Under -race (make test) a slot rewritten while a reader may still read it is also a data
// race: with reuse made unsafe (safe() returning the maximal epoch) the test fails there.
func TestReusedNodesNeverOverCount(t *testing.T) {
	const rounds, long, query = 3000, 61, 64
	ix := index.New(index.Options{})
	rank := event.Rank{WorkerID: 1}
	path := make([]uint64, query)
	path[0] = 1
	for i := 1; i < query; i++ {
		path[i] = 7
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	var queries atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out []index.Score
			for !done.Load() {
				out = ix.FindMatchesInto(out, path, false)
				for _, s := range out {
					if s.Score > 4 {
						t.Errorf("rank %d/%d scores %d on a path it holds 4 blocks of", s.WorkerID, s.DPRank, s.Score)
						return
					}
				}
				queries.Add(1)
			}
		}()
	}
	x := make([]event.Block, 4)
	y := make([]event.Block, long)
	var xh, yh []uint64
	next := uint64(1)
	chain := func(blocks []event.Block, first uint64) []uint64 {
		hs := make([]uint64, len(blocks))
		for i := range blocks {
			tok := uint64(7)
			if i == 0 {
				tok = first
			}
			blocks[i] = event.Block{BlockHash: next, TokensHash: tok}
			hs[i] = next
			next++
		}
		return hs
	}
	for round := range rounds {
		xh = chain(x, 1)
		yh = chain(y, 1000+uint64(round))
		for _, ev := range []event.RouterEvent{event.Stored(rank, 0, nil, x...), event.Stored(rank, 0, nil, y...)} {
			if res := ix.Apply(&ev); res.Status != index.StatusOK {
				t.Fatalf("round %d: store: %v", round, res.Status)
			}
		}
		first, second := xh, yh
		if round%2 == 1 {
			first, second = yh, xh
		}
		for _, hs := range [][]uint64{first, second} {
			if rm := event.Removed(rank, 0, hs...); ix.Apply(&rm).Status != index.StatusOK {
				t.Fatalf("round %d: remove failed", round)
			}
		}
	}
	done.Store(true)
	wg.Wait()
	if n := ix.NodeCount(); n != 0 {
		t.Fatalf("%d nodes left", n)
	}
	// 195,000 nodes were made, at most 65 live at once: their slots were reused. Not all: a
	// slot waits while a reader that may have seen it is in its epoch, and a reader descheduled
	// mid-query (two readers and a writer on two cores) holds back reuse meanwhile: a quarter
	// of the nodes get a fresh slot here, 6 % under -race, and up to 56 % was seen on a busy
	// machine (one run in ten failed a bound of a half): the bound is three quarters, which a
	// slab that reused nothing (one slot per node) still fails.
	if n := ix.NodeSlots(); n > rounds*(4+long)*3/4 {
		t.Fatalf("%d node slots made for %d rounds of 65 nodes: slots are not reused", n, rounds)
	}
	t.Logf("%d queries during %d rounds, %d node slots", queries.Load(), rounds, ix.NodeSlots())
}
