package lanes

import (
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/testutil"
)

// TestFormat3DirReplaysAsWritten: a data dir of the format-3 binary (testdata/format3, its
// SOURCE.md says what it holds and what that binary answered) replays to the same ranks, scores,
// tiers and log: a snapshot with the log after it (worker 1), a batch with a removal (2), a
// host_pinned event and a grouped one (3: the replay leaves the bulk build for the group gate),
// a recorded gap (4), a Cleared inside a batch (5). Run twice: the second open replays what the
// first left. testdata/format4 is the same script written by the format-4 binary (group records,
// a retention cut inside one): it replays the same.
func TestFormat3DirReplaysAsWritten(t *testing.T) {
	for _, c := range []struct {
		dir     string
		records int // log records of worker 1 (ids 9..12)
	}{{"format3", 4}, {"format4", 1}} {
		t.Run(c.dir, func(t *testing.T) { replaysAsWritten(t, "../testdata/"+c.dir+"/datadir", c.records) })
	}
}

func replaysAsWritten(t *testing.T, src string, worker1Records int) {
	fs := vfs.NewMem()
	testutil.CopyDir(t, fs, src, "data")
	chain := make([]uint64, 12)
	for i := range chain {
		chain[i] = uint64(i + 1)
	}
	scores := []struct {
		q    []uint64
		rank event.Rank
		want uint32
	}{
		{chain, event.Rank{WorkerID: 1}, 12},
		{[]uint64{210, 220}, event.Rank{WorkerID: 2}, 1},
		{[]uint64{320, 330}, event.Rank{WorkerID: 3, DPRank: 1}, 2},
		{[]uint64{410, 420}, event.Rank{WorkerID: 4}, 0},
		{[]uint64{510}, event.Rank{WorkerID: 5}, 0},
		{[]uint64{530}, event.Rank{WorkerID: 5}, 1},
	}
	ranks := []struct {
		rank       event.Rank
		last, lost uint64
		degraded   bool
		logIDs     []uint64
	}{
		{event.Rank{WorkerID: 1}, 12, 0, false, []uint64{9, 10, 11, 12}},
		{event.Rank{WorkerID: 2}, 2, 0, false, []uint64{1, 2}},
		{event.Rank{WorkerID: 3, DPRank: 1}, 2, 0, false, []uint64{1, 2}},
		{event.Rank{WorkerID: 4}, 5, 1, true, []uint64{5}},
		{event.Rank{WorkerID: 5}, 3, 0, false, []uint64{1, 2, 3}},
	}
	for round := 0; round < 2; round++ {
		f := open(t, fs, Options{})
		ix, ts, p, lg := f.ix, f.ts, f.p, f.log
		for _, c := range scores {
			got := uint32(0)
			for _, s := range ix.FindMatches(c.q, false) {
				if s.Rank() == c.rank {
					got = s.Score
				}
			}
			if got != c.want {
				t.Errorf("round %d: %v scores %d on %v, want %d", round, c.rank, got, c.q, c.want)
			}
		}
		if got := ts.TierBlocks(event.Rank{WorkerID: 3, DPRank: 1}); got[event.TierHostPinned] != 1 {
			t.Errorf("round %d: worker 3 tiers %v, want 1 host_pinned block", round, got)
		}
		for _, c := range ranks {
			rs, ok := p.RankStatus(c.rank)
			if !ok || rs.Last != c.last || rs.Lost != c.lost || rs.Degraded != c.degraded {
				t.Errorf("round %d: %v status %+v (ok %v), want last %d lost %d degraded %v", round, c.rank, rs, ok, c.last, c.lost, c.degraded)
			}
			var ids []uint64
			if err := lg.Range(c.rank, 0, 0, func(ev *event.RouterEvent) error {
				ids = append(ids, ev.EventID)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids, c.logIDs) {
				t.Errorf("round %d: %v log ids %v, want %v", round, c.rank, ids, c.logIDs)
			}
		}
		lo, hi := store.RankLogBounds(event.Rank{WorkerID: 1})
		it, err := f.st.DB().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			t.Fatal(err)
		}
		records := 0
		for valid := it.First(); valid; valid = it.Next() {
			records++
		}
		_ = it.Close()
		if records != worker1Records {
			t.Errorf("round %d: worker 1 has %d log records, want %d", round, records, worker1Records)
		}
		if rs, _ := p.RankStatus(event.Rank{WorkerID: 3, DPRank: 1}); len(rs.Groups) != 1 || rs.Groups[0].Kind != event.GroupKindFullAttention {
			t.Errorf("round %d: worker 3 groups %+v", round, rs.Groups)
		}
		f.close()
	}
}
