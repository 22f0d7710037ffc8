package wal

import (
	"errors"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
	"pgregory.net/rapid"
)

func genEvent(t *rapid.T, label string) event.RouterEvent {
	hash := rapid.OneOf(rapid.Uint64(), rapid.Uint64Range(0, 300), rapid.Just(uint64(1<<64-1)))
	r := event.Rank{WorkerID: hash.Draw(t, label+"worker"), DPRank: rapid.Uint32().Draw(t, label+"dp")}
	id := hash.Draw(t, label+"id")
	ev := event.RouterEvent{WorkerID: r.WorkerID, DPRank: r.DPRank, EventID: id,
		Tier: event.Tier(rapid.IntRange(0, 3).Draw(t, label+"tier"))}
	switch rapid.IntRange(1, 3).Draw(t, label+"kind") {
	case 1:
		ev.Kind = event.KindStored
		if rapid.Bool().Draw(t, label+"hasParent") {
			ev.HasParent, ev.ParentHash = true, hash.Draw(t, label+"parent")
		}
		n := rapid.IntRange(0, 200).Draw(t, label+"nblocks")
		for i := 0; i < n; i++ {
			ev.Blocks = append(ev.Blocks, event.Block{BlockHash: hash.Draw(t, label+"bh"), TokensHash: hash.Draw(t, label+"th")})
		}
	case 2:
		ev.Kind = event.KindRemoved
		ev.Removed = rapid.SliceOfN(hash, 0, 200).Draw(t, label+"removed")
	case 3:
		ev.Kind = event.KindCleared
	}
	if rapid.Bool().Draw(t, label+"hasSourceSeq") {
		ev.HasSourceSeq, ev.SourceSeq = true, hash.Draw(t, label+"sourceSeq")
	}
	if ev.Kind != event.KindCleared && rapid.Bool().Draw(t, label+"hasGroup") {
		u32 := rapid.OneOf(rapid.Uint32(), rapid.Uint32Range(0, 200))
		kind := rapid.SampledFrom([]event.GroupKind{event.GroupKindUnset, event.GroupKindFullAttention,
			event.GroupKindSlidingWindow, event.GroupKindMamba, event.GroupKindCrossAttention, event.GroupKindOther}).Draw(t, label+"groupKind")
		ev.HasGroup = true
		ev.Group = event.Group{Idx: u32.Draw(t, label+"groupIdx"), Kind: kind,
			SlidingWindow: u32.Draw(t, label+"window"), BlockSize: u32.Draw(t, label+"blockSize")}
	}
	return ev
}

// normalize maps empty slices to nil so decoded events compare with reflect.DeepEqual.
func normalize(ev event.RouterEvent) event.RouterEvent {
	if len(ev.Blocks) == 0 {
		ev.Blocks = nil
	}
	if len(ev.Removed) == 0 {
		ev.Removed = nil
	}
	return ev
}

// Every field round-trips; any damaged byte, a truncation, or the value under another key is
// reported as corruption.
func TestRecordRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ev := genEvent(t, "")
		key := store.LogKey(ev.Rank(), ev.EventID)
		val := EncodeRecord(nil, &ev)
		if len(val) != RecordSize(&ev) {
			t.Fatalf("RecordSize %d, encoded %d", RecordSize(&ev), len(val))
		}
		var got event.RouterEvent
		got.Blocks = make([]event.Block, 3) // stale contents must not leak
		if err := DecodeRecord(&got, key, val); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(ev)) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, ev)
		}

		i := rapid.IntRange(0, len(val)-1).Draw(t, "flip")
		bad := append([]byte(nil), val...)
		bad[i] ^= byte(rapid.IntRange(1, 255).Draw(t, "xor"))
		if err := DecodeRecord(&got, key, bad); !errors.Is(err, ErrCorruption) {
			t.Fatalf("byte %d damaged: err %v, want ErrCorruption", i, err)
		}
		if err := DecodeRecord(&got, key, val[:i]); !errors.Is(err, ErrCorruption) {
			t.Fatalf("truncated to %d: err %v, want ErrCorruption", i, err)
		}
		other := store.LogKey(ev.Rank(), ev.EventID+1)
		if err := DecodeRecord(&got, other, val); !errors.Is(err, ErrCorruption) {
			t.Fatalf("under another key: err %v, want ErrCorruption", err)
		}
	})
}

func TestSnapshotRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := event.Rank{WorkerID: rapid.Uint64().Draw(t, "w"), DPRank: rapid.Uint32().Draw(t, "d")}
		n := rapid.IntRange(0, 20).Draw(t, "n")
		evs := make([]event.RouterEvent, n)
		for i := range evs {
			evs[i] = genEvent(t, "ev")
			evs[i].WorkerID, evs[i].DPRank = r.WorkerID, r.DPRank
		}
		last := rapid.Uint64().Draw(t, "last")
		val := encodeSnapshot(r, last, evs)
		s, err := decodeSnapshot(r, val)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if s.LastEventID != last || len(s.Events) != n {
			t.Fatalf("snapshot last %d n %d, want %d %d", s.LastEventID, len(s.Events), last, n)
		}
		for i := range evs {
			if !reflect.DeepEqual(normalize(s.Events[i]), normalize(evs[i])) {
				t.Fatalf("event %d:\n got %+v\nwant %+v", i, s.Events[i], evs[i])
			}
		}
		i := rapid.IntRange(0, len(val)-1).Draw(t, "flip")
		bad := append([]byte(nil), val...)
		bad[i] ^= 0x40
		if _, err := decodeSnapshot(r, bad); err == nil {
			t.Fatalf("byte %d damaged: decoded", i)
		}
	})
}

func TestMetaValuesRoundTrip(t *testing.T) {
	r := event.Rank{WorkerID: 9, DPRank: 2}
	for _, c := range []Cursor{{}, {LastEventID: 1<<64 - 1, Degraded: true, Epoch: 1<<32 - 1}, {LastEventID: 5, Epoch: 3}} {
		got, err := decodeCursor(r, encodeCursor(r, c))
		if err != nil || got != c {
			t.Errorf("cursor %+v: got %+v %v", c, got, err)
		}
		if _, err := decodeCursor(event.Rank{WorkerID: 9}, encodeCursor(r, c)); err == nil {
			t.Errorf("cursor of %v decoded under another rank", r)
		}
	}
	g := Gap{From: 3, To: 9, Outcome: GapPending, At: unixNano(1_700_000_000_123_456_789)}
	if got, err := decodeGap(r, encodeGap(r, g)); err != nil || !reflect.DeepEqual(got, g) {
		t.Errorf("gap: got %+v %v", got, err)
	}
}

func TestEncodeRecordDoesNotAllocate(t *testing.T) {
	ev := realisticEvent(event.Rank{WorkerID: 3}, 42)
	buf := make([]byte, 0, RecordSize(&ev))
	var out event.RouterEvent
	key := store.LogKey(ev.Rank(), ev.EventID)
	val := EncodeRecord(nil, &ev)
	_ = DecodeRecord(&out, key, val) // size out's slices
	if n := testing.AllocsPerRun(100, func() { buf = EncodeRecord(buf[:0], &ev) }); n != 0 {
		t.Errorf("EncodeRecord: %v allocs", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = DecodeRecord(&out, key, val) }); n != 0 {
		t.Errorf("DecodeRecord into a reused event: %v allocs", n)
	}
}

// Damaged values on disk are reported with ErrCorruption by every reader.
func TestCorruptValuesAreReported(t *testing.T) {
	fs := vfs.NewMem()
	st, l := openLog(t, fs, Sync)
	defer st.Close()
	r := event.Rank{WorkerID: 5, DPRank: 1}
	b := l.NewBatch()
	// Two commits, so ids 1-2 are one group record and id 3 another: a damaged record loses
	// its own events only.
	for id := uint64(1); id <= 3; id++ {
		ev := realisticEvent(r, id)
		b.Append(&ev)
		if id >= 2 {
			b.SetCursor(r, Cursor{LastEventID: id})
			if err := l.Commit(bg, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	ev1 := realisticEvent(r, 1)
	if err := l.WriteSnapshot(bg, r, 1, []event.RouterEvent{ev1}); err != nil {
		t.Fatal(err)
	}
	flip := func(key []byte, at int) {
		t.Helper()
		v, closer, err := st.DB().Get(key)
		if err != nil {
			t.Fatal(err)
		}
		v = append([]byte(nil), v...)
		closer.Close()
		v[at] ^= 1
		if err := st.DB().Set(key, v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	flip(store.RankKey(store.PrefixSnapshot, r), 20)
	if _, _, err := l.ReadSnapshot(r); !errors.Is(err, ErrCorruption) {
		t.Errorf("ReadSnapshot of a damaged snapshot: %v, want ErrCorruption", err)
	}
	// The log is the truth: the bad snapshot can be dropped and the log still reads.
	if err := l.DropSnapshot(bg, r); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.ReadSnapshot(r); ok || err != nil {
		t.Errorf("after drop: ok=%v err=%v", ok, err)
	}

	flip(store.LogKey(r, 3), 10)
	var seen []uint64
	err := l.Range(r, 0, 0, func(ev *event.RouterEvent) error { seen = append(seen, ev.EventID); return nil })
	if !errors.Is(err, ErrCorruption) || !reflect.DeepEqual(seen, []uint64{2}) {
		t.Errorf("Range over a damaged record: seen %v err %v, want [2] and ErrCorruption", seen, err)
	}
	flip(store.MetaKey(r, metaCursor), 2)
	if _, err := l.RankMeta(r); !errors.Is(err, ErrCorruption) {
		t.Errorf("RankMeta with a damaged cursor: %v, want ErrCorruption", err)
	}
}

func TestParseDurability(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Durability
		ok   bool
	}{{"sync", Sync, true}, {"none", NoSync, true}, {"", 0, false}, {"fsync", 0, false}} {
		got, err := ParseDurability(tc.in)
		if (err == nil) != tc.ok || (tc.ok && (got != tc.want || got.String() != tc.in)) {
			t.Errorf("ParseDurability(%q) = %v, %v", tc.in, got, err)
		}
	}
}
