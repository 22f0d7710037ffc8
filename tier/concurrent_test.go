package tier_test

import (
	"sync"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/tier"
)

// TestConcurrentWritersAndWalk checks the concurrency contract (doc.go): one writer per rank,
// writers of different ranks and tier walks at once (run it with -race). Every writer stores and
// removes host and disk chains that share edges with the others; the walk must never report an
// extension beyond the query, and at the end every tier is empty.
func TestConcurrentWritersAndWalk(t *testing.T) {
	ts := tier.New(nil)
	const writers, rounds = 4, 300
	q := []uint64{0, 1, 2, 3, 4, 5, 6, 7}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rk := event.Rank{WorkerID: uint64(w)}
			dev := event.Stored(rk, 0, nil, event.Block{BlockHash: 100, TokensHash: 0})
			ts.Apply(&dev)
			for i := range rounds {
				n := 1 + (i+w)%7
				var blocks []event.Block
				var hashes []uint64
				for j := 1; j <= n; j++ {
					blocks = append(blocks, event.Block{BlockHash: 100 + uint64(j), TokensHash: uint64(j)})
					hashes = append(hashes, 100+uint64(j))
				}
				p := uint64(100)
				for _, tr := range []event.Tier{event.TierHostPinned, event.TierDisk} {
					st, rm := event.Stored(rk, 0, &p, blocks...), event.Removed(rk, 0, hashes...)
					st.Tier, rm.Tier = tr, tr
					ts.Apply(&st)
					if i%3 == 0 {
						ts.Apply(&rm)
					}
				}
				if i%50 == 49 {
					cl := event.Cleared(rk, 0)
					ts.Apply(&cl)
					ts.Apply(&dev)
				}
			}
			cl := event.Cleared(rk, 0)
			ts.Apply(&cl)
		}()
	}
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		var dst []tier.Score
		for {
			select {
			case <-stop:
				return
			default:
			}
			dst = ts.FindMatchesInto(dst, q, false, false)
			for _, s := range dst {
				if total := s.Score.Score + s.Ext[0] + s.Ext[1] + s.Ext[2]; int(total) > len(q) {
					t.Errorf("rank %d/%d matched %d blocks of a %d-block query", s.WorkerID, s.DPRank, total, len(q))
				}
			}
		}
	}()
	wg.Wait()
	close(stop)
	readers.Wait()
	for _, tr := range tier.Lower {
		if lx := ts.Lower(tr); lx.Edges() != 0 || lx.Blocks() != 0 {
			t.Fatalf("%s: %d edges, %d blocks left after every rank cleared", tr, lx.Edges(), lx.Blocks())
		}
	}
}
