package wal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

// readerFixture is a log of many ranks of every shape the replay meets: group records and lone
// records, id gaps, cursors or none, gap ledgers, pending events, snapshots that cut the log
// (inside a group too) and checkpoints that keep it, removed ranks (and one written again after
// its removal), and damaged values (a log record, a snapshot, a cursor, a gap, a pending event),
// half of it flushed to sstables and half in the memtable.
func readerFixture(t *testing.T) (*Log, []event.Rank) {
	t.Helper()
	st, l := openLog(t, vfs.NewMem(), NoSync)
	t.Cleanup(func() { _ = st.Close() })
	rng := rand.New(rand.NewPCG(7, 11))
	var ranks []event.Rank
	for w := uint64(1); w <= 60; w++ {
		for dp := uint32(0); dp < 3; dp++ {
			ranks = append(ranks, event.Rank{Partition: uint32(w % 2), WorkerID: w * 3, DPRank: dp})
		}
	}
	b := l.NewBatch()
	defer b.Close()
	commit := func() {
		t.Helper()
		if err := l.Commit(bg, b); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range ranks {
		if i == len(ranks)/2 {
			if err := st.DB().Flush(); err != nil {
				t.Fatal(err)
			}
		}
		id := uint64(1)
		for range rng.IntN(5) { // commits: one run of consecutive ids each, a gap before some
			if rng.IntN(3) == 0 {
				id += uint64(1 + rng.IntN(3))
			}
			for range 1 + rng.IntN(6) {
				var ev event.RouterEvent
				switch k := rng.IntN(10); {
				case k < 6:
					ev = realisticEvent(r, id)
					if k == 0 {
						ev.HasGroup, ev.Group = true, event.Group{Idx: 1, Kind: event.GroupKindSlidingWindow, SlidingWindow: 32, BlockSize: 16}
					}
				case k < 9:
					ev = event.Removed(r, id, id*8, id*8+1)
				default:
					ev = event.Cleared(r, id)
				}
				ev.Partition = r.Partition
				b.Append(&ev)
				id++
			}
			if rng.IntN(4) != 0 {
				b.SetCursor(r, Cursor{LastEventID: id - 1, Degraded: rng.IntN(5) == 0, Epoch: uint32(rng.IntN(3))})
			}
			commit()
		}
		last := id - 1
		if rng.IntN(4) == 0 {
			b.AddGap(r, Gap{From: last + 1, To: last + 2, Outcome: GapOutcome(rng.IntN(3))})
			commit()
		}
		if rng.IntN(5) == 0 {
			for p := last + 3; p < last+3+uint64(1+rng.IntN(3)); p++ {
				ev := realisticEvent(r, p)
				ev.Partition = r.Partition
				b.AddPending(&ev)
			}
			commit()
		}
		if last > 2 {
			dump := []event.RouterEvent{realisticEvent(r, 1)}
			dump[0].Partition = r.Partition
			at := 1 + uint64(rng.IntN(int(last-1)))
			switch rng.IntN(4) {
			case 0: // a snapshot: the log up to it is cut (maybe inside a group)
				if err := l.WriteSnapshot(bg, r, at, dump); err != nil {
					t.Fatal(err)
				}
			case 1: // a checkpoint: the log stays
				var enc SnapshotEncoder
				enc.Add(&dump[0])
				if err := l.WriteCheckpoint(bg, r, at, &enc); err != nil {
					t.Fatal(err)
				}
			}
		}
		switch rng.IntN(12) {
		case 0: // removed
			b.RemoveRank(r)
			commit()
		case 1: // removed, then written again without a cursor: a tombstone over a log
			b.RemoveRank(r)
			commit()
			ev := realisticEvent(r, 1)
			ev.Partition = r.Partition
			b.Append(&ev)
			commit()
		}
	}
	flip := func(key []byte, at int) {
		t.Helper()
		v, closer, err := st.DB().Get(key)
		if err != nil {
			t.Fatalf("damaging %x: %v", key, err)
		}
		v = append([]byte(nil), v...)
		_ = closer.Close()
		v[at%len(v)] ^= 1
		if err := st.DB().Set(key, v, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	// One damaged value of each kind, on ranks that have one.
	damaged := map[byte]bool{}
	for _, r := range ranks {
		for _, p := range []byte{store.PrefixLog, store.PrefixSnapshot, store.PrefixRankMeta, store.PrefixGap, store.PrefixPending} {
			if damaged[p] {
				continue
			}
			lo, hi := store.RankBounds(p, r)
			it, err := st.DB().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
			if err != nil {
				t.Fatal(err)
			}
			var key []byte
			if it.Last() { // a log's last record: the replay reads it after the snapshot
				key = slices.Clone(it.Key())
			}
			_ = it.Close()
			if key != nil && r.WorkerID%4 == uint64(len(damaged)%4) {
				flip(key, 7)
				damaged[p] = true
			}
		}
	}
	if len(damaged) != 5 {
		t.Fatalf("damaged %d kinds of value, want 5", len(damaged))
	}
	// Ranks the log does not know, between and around the others.
	ranks = append(ranks, event.Rank{WorkerID: 4}, event.Rank{Partition: 1, WorkerID: 1 << 40}, event.Rank{})
	slices.SortFunc(ranks, event.Rank.Compare)
	return l, ranks
}

// rankReads is the read methods a Log and a Reader share. of r, in its order, through one reader's methods.
type rankReads interface {
	RankMeta(event.Rank) (RankMeta, error)
	ReadSnapshot(event.Rank) (Snapshot, bool, error)
	Range(event.Rank, uint64, int, func(*event.RouterEvent) error) error
	Pending(event.Rank) ([]event.RouterEvent, error)
	First(event.Rank) (uint64, error)
	Last(event.Rank) (uint64, error)
}

// readAll is what the replay reads of r, in its order (and Ranges from other ids), as text.
func readAll(rd rankReads, r event.Rank, from uint64, limit int) string {
	out := ""
	say := func(what string, v any, err error) {
		out += fmt.Sprintf("%s: %+v err=%v corrupt=%v\n", what, v, err, errors.Is(err, ErrCorruption))
	}
	m, err := rd.RankMeta(r)
	say("meta", m, err)
	s, ok, err := rd.ReadSnapshot(r)
	say("snapshot", fmt.Sprint(ok, s), err)
	rangeOf := func(from uint64, limit int) {
		var evs []event.RouterEvent
		err := rd.Range(r, from, limit, func(ev *event.RouterEvent) error { evs = append(evs, ev.Clone()); return nil })
		say(fmt.Sprintf("range from %d limit %d", from, limit), evs, err)
	}
	rangeOf(m.SnapshotID+1, 0)
	rangeOf(from, limit)
	rangeOf(from+1, 0) // after a walk stopped inside the rank's log
	p, err := rd.Pending(r)
	say("pending", p, err)
	last, err := rd.Last(r)
	say("last", last, err)
	first, err := rd.First(r)
	say("first", first, err)
	return out
}

// A Reader answers every read exactly as the Log does (values and errors, damage included),
// reading the ranks in key order as the replay does, and in any other order.
func TestReaderAnswersAsTheLog(t *testing.T) {
	l, ranks := readerFixture(t)
	rng := rand.New(rand.NewPCG(3, 5))
	froms := make([]uint64, len(ranks))
	limits := make([]int, len(ranks))
	want := make([]string, len(ranks))
	corrupt := 0
	for i, r := range ranks {
		froms[i], limits[i] = uint64(rng.IntN(12)), rng.IntN(6)
		want[i] = readAll(l, r, froms[i], limits[i])
		if strings.Contains(want[i], "corrupt=true") {
			corrupt++
		}
	}
	if corrupt < 5 {
		t.Fatalf("%d ranks read with corruption, want every damaged one (5)", corrupt)
	}
	orders := map[string][]int{"ascending": {}, "random": {}, "descending": {}}
	for i := range ranks {
		orders["ascending"] = append(orders["ascending"], i)
		orders["descending"] = append(orders["descending"], len(ranks)-1-i)
	}
	orders["random"] = rng.Perm(len(ranks))
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			rd := l.NewReader()
			for _, i := range order {
				if got := readAll(rd, ranks[i], froms[i], limits[i]); got != want[i] {
					t.Fatalf("rank %v:\nreader:\n%s\nlog:\n%s", ranks[i], got, want[i])
				}
			}
			if err := rd.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := rd.RankMeta(ranks[0]); !errors.Is(err, ErrClosed) {
				t.Fatalf("RankMeta after Close: %v, want ErrClosed", err)
			}
		})
	}
	rd := l.NewReader()
	defer rd.Close()
	_ = l.Close()
	if err := rd.Range(ranks[0], 0, 0, func(*event.RouterEvent) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Range on a closed log: %v, want ErrClosed", err)
	}
}
