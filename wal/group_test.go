package wal

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
	"pgregory.net/rapid"
)

// A group record round-trips every event; any damaged byte, a truncation, or the value under
// another rank or last id (the ids of its events) is reported as corruption before any event
// is handed out.
func TestGroupRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := event.Rank{Partition: rapid.Uint32Range(0, 3).Draw(t, "part"), WorkerID: rapid.Uint64().Draw(t, "w"), DPRank: rapid.Uint32().Draw(t, "d")}
		k := rapid.IntRange(1, 12).Draw(t, "k")
		first := rapid.OneOf(rapid.Uint64Range(0, 300), rapid.Uint64Range(1<<64-20, 1<<64-12)).Draw(t, "first")
		var want []event.RouterEvent
		var body []byte
		for i := range k {
			ev := genEvent(t, "ev")
			ev.Partition, ev.WorkerID, ev.DPRank, ev.EventID = r.Partition, r.WorkerID, r.DPRank, first+uint64(i)
			want = append(want, normalize(ev.Clone()))
			body = appendBody(body, &ev)
		}
		last := first + uint64(k-1)
		key := store.LogKey(r, last)
		val := appendGroupValue(nil, r, last, uint64(k), body)
		if k == 1 {
			if single := EncodeRecord(nil, &want[0]); !reflect.DeepEqual(single, val) {
				t.Fatalf("a group of one must be the version-1 record")
			}
		}
		if lo, hi, ok := RecordIDs(key, val); !ok || lo != first || hi != last {
			t.Fatalf("RecordIDs %d-%d %v, want %d-%d", lo, hi, ok, first, last)
		}
		past := k // from past the last id: none, unless the last id is the largest (from would wrap to 0)
		if last == math.MaxUint64 {
			past = k - 1
		}
		from := first + uint64(rapid.IntRange(0, past).Draw(t, "from"))
		var got []event.RouterEvent
		var ev event.RouterEvent
		ev.Blocks = make([]event.Block, 3) // stale contents must not leak
		if err := DecodeRecords(&ev, key, val, from, func(ev *event.RouterEvent) error {
			got = append(got, normalize(ev.Clone()))
			return nil
		}); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !reflect.DeepEqual(got, want[from-first:]) && len(got)+len(want[from-first:]) > 0 {
			t.Fatalf("from %d:\n got %+v\nwant %+v", from, got, want[from-first:])
		}

		seen := 0
		count := func(*event.RouterEvent) error { seen++; return nil }
		i := rapid.IntRange(0, len(val)-1).Draw(t, "flip")
		bad := append([]byte(nil), val...)
		bad[i] ^= byte(rapid.IntRange(1, 255).Draw(t, "xor"))
		if err := DecodeRecords(&ev, key, bad, 0, count); !errors.Is(err, ErrCorruption) || seen != 0 {
			t.Fatalf("byte %d damaged: err %v after %d events, want ErrCorruption before any", i, err, seen)
		}
		if err := DecodeRecords(&ev, key, val[:i], 0, count); !errors.Is(err, ErrCorruption) || seen != 0 {
			t.Fatalf("truncated to %d: err %v after %d events", i, err, seen)
		}
		for _, other := range [][]byte{store.LogKey(r, last+1), store.LogKey(event.Rank{Partition: r.Partition + 1, WorkerID: r.WorkerID, DPRank: r.DPRank}, last)} {
			if err := DecodeRecords(&ev, other, val, 0, count); !errors.Is(err, ErrCorruption) || seen != 0 {
				t.Fatalf("under key %x: err %v after %d events", other, err, seen)
			}
		}
	})
}

// logModel is the reference: per rank, the events in id order as appended.
type logModel map[event.Rank][]event.RouterEvent

// Batches of appends across ranks (runs, gaps, resets) read back per event exactly as appended,
// from any id with any limit; retention cuts at any id, inside a group or not, leave exactly
// the events at or above the cut and no record holding an id below it.
func TestGroupedLogProperty(tt *testing.T) {
	rapid.Check(tt, func(t *rapid.T) {
		st, l := openLog(tt, vfs.NewMem(), NoSync)
		defer st.Close()
		ranks := []event.Rank{{WorkerID: 1}, {WorkerID: 1, DPRank: 1}, {Partition: 2, WorkerID: 7}}
		model := logModel{}
		next := map[event.Rank]uint64{}
		b := l.NewBatch()
		defer b.Close()
		for range rapid.IntRange(1, 6).Draw(t, "batches") {
			for range rapid.IntRange(1, 20).Draw(t, "ops") {
				r := ranks[rapid.IntRange(0, len(ranks)-1).Draw(t, "rank")]
				switch rapid.IntRange(0, 9).Draw(t, "op") {
				case 0: // a reset: the rank's log so far is gone, its ids may restart
					b.ResetRank(r)
					model[r], next[r] = nil, rapid.Uint64Range(0, 2).Draw(t, "restart")
				case 1: // a gap
					next[r] += rapid.Uint64Range(1, 3).Draw(t, "gap")
				}
				ev := realisticEvent(r, next[r])
				ev.Partition = r.Partition
				if rapid.Bool().Draw(t, "removed") {
					ev = event.Removed(r, next[r], next[r]*3)
					ev.Partition = r.Partition
				}
				next[r]++
				b.Append(&ev)
				model[r] = append(model[r], ev.Clone())
			}
			if err := l.Commit(bg, b); err != nil {
				t.Fatal(err)
			}
		}
		check := func(when string) {
			for _, r := range ranks {
				evs := model[r]
				first, _ := l.First(r)
				last, _ := l.Last(r)
				var wf, wl uint64
				if len(evs) > 0 {
					wf, wl = evs[0].EventID, evs[len(evs)-1].EventID
				}
				if first != wf || last != wl {
					t.Fatalf("%s: rank %v first %d last %d, want %d %d", when, r, first, last, wf, wl)
				}
				from := rapid.Uint64Range(0, wl+1).Draw(t, "from")
				limit := rapid.IntRange(0, 5).Draw(t, "limit")
				var want []event.RouterEvent
				for _, ev := range evs {
					if ev.EventID >= from && (limit == 0 || len(want) < limit) {
						want = append(want, normalize(ev))
					}
				}
				var got []event.RouterEvent
				if err := l.Range(r, from, limit, func(ev *event.RouterEvent) error {
					got = append(got, normalize(ev.Clone()))
					return nil
				}); err != nil {
					t.Fatalf("%s: range: %v", when, err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: rank %v range from %d limit %d:\n got %v\nwant %v", when, r, from, limit, ids(got), ids(want))
				}
			}
		}
		check("after the appends")
		for _, r := range ranks {
			evs := model[r]
			if len(evs) == 0 || !rapid.Bool().Draw(t, "cut") {
				continue
			}
			upTo := evs[rapid.IntRange(0, len(evs)-1).Draw(t, "upTo")].EventID
			if err := l.WriteSnapshot(bg, r, upTo, nil); err != nil {
				t.Fatal(err)
			}
			var kept []event.RouterEvent
			for _, ev := range evs {
				if ev.EventID > upTo {
					kept = append(kept, ev)
				}
			}
			model[r] = kept
			lo, hi := store.RankLogBounds(r)
			it, _ := st.DB().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
			for valid := it.First(); valid; valid = it.Next() {
				if first, _, ok := RecordIDs(it.Key(), it.Value()); !ok || first <= upTo {
					t.Fatalf("rank %v cut at %d: a record holds id %d (ok %v)", r, upTo+1, first, ok)
				}
			}
			_ = it.Close()
		}
		check("after the cuts")
	})
}

func ids(evs []event.RouterEvent) []uint64 {
	out := make([]uint64, len(evs))
	for i := range evs {
		out[i] = evs[i].EventID
	}
	return out
}

// One commit of many events of a rank is one log record per run of consecutive ids.
func TestCommitWritesOneRecordPerRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		ids  map[event.Rank][]uint64 // appended round robin across ranks
		want int                     // log keys written
	}{
		{"one rank, one run", map[event.Rank][]uint64{{WorkerID: 1}: {1, 2, 3, 4, 5, 6, 7, 8}}, 1},
		{"two ranks interleaved", map[event.Rank][]uint64{{WorkerID: 1}: {1, 2, 3, 4}, {WorkerID: 2}: {10, 11, 12}}, 2},
		{"a gap splits a run", map[event.Rank][]uint64{{WorkerID: 1}: {1, 2, 5, 6}}, 2},
		{"single events", map[event.Rank][]uint64{{WorkerID: 1}: {3}, {WorkerID: 2}: {3}, {WorkerID: 3}: {3}}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, l := openLog(t, vfs.NewMem(), NoSync)
			defer st.Close()
			b := l.NewBatch()
			defer b.Close()
			ranks := []event.Rank{{WorkerID: 1}, {WorkerID: 2}, {WorkerID: 3}}
			for i := 0; ; i++ {
				any := false
				for _, r := range ranks {
					if i < len(tc.ids[r]) {
						ev := realisticEvent(r, tc.ids[r][i])
						b.Append(&ev)
						any = true
					}
				}
				if !any {
					break
				}
			}
			if err := l.Commit(bg, b); err != nil {
				t.Fatal(err)
			}
			lo, hi := store.PrefixBounds(store.PrefixLog)
			it, _ := st.DB().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
			keys := 0
			for valid := it.First(); valid; valid = it.Next() {
				keys++
			}
			_ = it.Close()
			if keys != tc.want {
				t.Errorf("%d log keys, want %d", keys, tc.want)
			}
			for _, r := range ranks {
				var got []uint64
				if err := l.Range(r, 0, 0, func(ev *event.RouterEvent) error { got = append(got, ev.EventID); return nil }); err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.ids[r]) && !(len(got) == 0 && len(tc.ids[r]) == 0) {
					t.Errorf("rank %v: ids %v, want %v", r, got, tc.ids[r])
				}
			}
		})
	}
}

// A reused batch commits without allocating per event: the runs' buffers are kept.
func TestGroupedCommitAllocations(t *testing.T) {
	st, l := openLog(t, vfs.NewMem(), NoSync)
	defer st.Close()
	b := l.NewBatch()
	defer b.Close()
	ranks := []event.Rank{{WorkerID: 1}, {WorkerID: 2}, {WorkerID: 3}, {WorkerID: 4}}
	evs := make([]event.RouterEvent, 64)
	id := uint64(1)
	commit := func() {
		for i := range evs {
			evs[i] = realisticEvent(ranks[i%len(ranks)], id+uint64(i/len(ranks)))
		}
		id += uint64(len(evs) / len(ranks))
		for i := range evs {
			b.Append(&evs[i])
		}
		if err := l.Commit(bg, b); err != nil {
			t.Fatal(err)
		}
	}
	commit() // size the buffers
	for i := range evs {
		evs[i] = realisticEvent(ranks[i%len(ranks)], 0) // allocate the events outside the count
	}
	if n := testing.AllocsPerRun(20, func() {
		for i := range evs {
			evs[i].EventID = id + uint64(i/len(ranks))
		}
		id += uint64(len(evs) / len(ranks))
		for i := range evs {
			b.Append(&evs[i])
		}
		if err := l.Commit(bg, b); err != nil {
			t.Fatal(err)
		}
	}); n > 4 {
		t.Errorf("%v allocations per 64-event commit, want at most 4 (Pebble's own)", n)
	}
}
