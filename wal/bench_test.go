package wal

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

// BenchmarkAppend measures durable append throughput (events/s) through the Log, next to the
// raw Pebble ceiling: the same encoded records set in a Pebble batch and committed in the same
// mode, nothing else (run first, so any ordering bias from the disk favours it). Every producer owns one rank; events are Stored with 8 blocks and a
// parent (145-byte records). Variants:
//
//	wal:        Batch.Append × batch, Commit
//	wal+cursor: the same plus SetCursor per commit (what ingest writes)
//	ceiling:    pebble.Batch.Set of pre-encoded key/value × batch, Commit
//
// Run on a real disk (b.TempDir):
//
//	go test ./wal -run '^$' -bench BenchmarkAppend -benchtime 2s
func BenchmarkAppend(b *testing.B) {
	for _, d := range []Durability{Sync, NoSync} {
		for _, producers := range []int{1, 16, 64} {
			for _, batch := range []int{1, 64} {
				for _, variant := range []string{"ceiling", "wal", "wal+cursor"} {
					name := fmt.Sprintf("%s/p=%d/batch=%d/%s", d, producers, batch, variant)
					b.Run(name, func(b *testing.B) { benchAppend(b, d, producers, batch, variant) })
				}
			}
		}
	}
}

const benchPool = 256 // distinct events per producer, reused with rising ids

func benchAppend(b *testing.B, d Durability, producers, batch int, variant string) {
	st, err := store.Open(b.TempDir(), store.Options{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	l, _ := Open(st, Options{Durability: d})
	wo := pebble.Sync
	if d == NoSync {
		wo = pebble.NoSync
	}
	pools := make([][]event.RouterEvent, producers)
	vals := make([][][]byte, producers)
	for g := range pools {
		r := event.Rank{WorkerID: uint64(g + 1)}
		for i := range benchPool {
			ev := realisticEvent(r, uint64(i+1))
			pools[g] = append(pools[g], ev)
			vals[g] = append(vals[g], EncodeRecord(nil, &ev))
		}
	}
	var claimed atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for g := range producers {
		wg.Go(func() {
			r := event.Rank{WorkerID: uint64(g + 1)}
			wb := l.NewBatch()
			defer wb.Close()
			pb := st.DB().NewBatch()
			defer pb.Close()
			key := make([]byte, 0, store.LogKeyLen)
			next := uint64(1)
			for claimed.Add(int64(batch)) <= int64(b.N)+int64(batch)-1 {
				switch variant {
				case "ceiling":
					for range batch {
						key = store.AppendLogKey(key[:0], r, next)
						_ = pb.Set(key, vals[g][next%benchPool], nil)
						next++
					}
					if err := pb.Commit(wo); err != nil {
						b.Error(err)
						return
					}
					pb.Reset()
				default:
					for range batch {
						ev := &pools[g][next%benchPool]
						ev.EventID = next
						wb.Append(ev)
						next++
					}
					if variant == "wal+cursor" {
						wb.SetCursor(r, Cursor{LastEventID: next - 1})
					}
					if err := l.Commit(bg, wb); err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
}

// BenchmarkRange measures reading one rank's log back (decode included), events/s.
func BenchmarkRange(b *testing.B) {
	st, err := store.Open(b.TempDir(), store.Options{Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	l, _ := Open(st, Options{Durability: NoSync})
	r := event.Rank{WorkerID: 1}
	const n = 100_000
	wb := l.NewBatch()
	for id := uint64(1); id <= n; id++ {
		ev := realisticEvent(r, id)
		wb.Append(&ev)
		if id%1000 == 0 {
			if err := l.Commit(bg, wb); err != nil {
				b.Fatal(err)
			}
		}
	}
	wb.Close()
	if err := st.DB().Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	events := 0
	for i := 0; i < b.N; i++ {
		var blocks int
		if err := l.Range(r, 0, 0, func(ev *event.RouterEvent) error {
			blocks += len(ev.Blocks)
			events++
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		if blocks != 8*n {
			b.Fatalf("read %d blocks", blocks)
		}
	}
	b.ReportMetric(float64(events)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkEncodeRecord measures the record codec alone.
func BenchmarkEncodeRecord(b *testing.B) {
	ev := realisticEvent(event.Rank{WorkerID: 1}, 7)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = EncodeRecord(buf[:0], &ev)
	}
}

func BenchmarkDecodeRecord(b *testing.B) {
	ev := realisticEvent(event.Rank{WorkerID: 1}, 7)
	key, val := store.LogKey(ev.Rank(), ev.EventID), EncodeRecord(nil, &ev)
	var out event.RouterEvent
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := DecodeRecord(&out, key, val); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplayReads measures the restart replay's reads of every rank in key order (RankMeta,
// First, ReadSnapshot, Range after the snapshot, Pending: lanes' replayRank) through the Log, which opens iterators
// per read, and through one Reader, which seeks its kept iterators: 20,480 ranks of 4 commits
// of 4 events (every other rank with a checkpoint), compacted into sstables, a 4 MiB block cache
// (a restart's log is far larger than its cache). Reported: ranks/s.
//
//	go test ./wal -run '^$' -bench BenchmarkReplayReads
func BenchmarkReplayReads(b *testing.B) {
	st, err := store.Open(b.TempDir(), store.Options{Logger: quietLogger(), CacheSize: 4 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	l, _ := Open(st, Options{Durability: NoSync})
	var ranks []event.Rank
	bt := l.NewBatch()
	defer bt.Close()
	for w := uint64(1); w <= 20480; w++ {
		r := event.Rank{WorkerID: w}
		ranks = append(ranks, r)
		for c := uint64(0); c < 4; c++ {
			for id := c*4 + 1; id <= c*4+4; id++ {
				ev := realisticEvent(r, id)
				bt.Append(&ev)
			}
			bt.SetCursor(r, Cursor{LastEventID: c*4 + 4})
		}
		if err := l.Commit(bg, bt); err != nil {
			b.Fatal(err)
		}
		if w%2 == 0 {
			var enc SnapshotEncoder
			ev := realisticEvent(r, 1)
			enc.Add(&ev)
			if err := l.WriteCheckpoint(bg, r, 8, &enc); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := st.CompactAll(bg); err != nil {
		b.Fatal(err)
	}
	replay := func(b *testing.B, rd rankReads) {
		for _, r := range ranks {
			m, err := rd.RankMeta(r)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := rd.First(r); err != nil {
				b.Fatal(err)
			}
			s, ok, err := rd.ReadSnapshot(r)
			if err != nil {
				b.Fatal(err)
			}
			from := uint64(0)
			if ok {
				from = s.LastEventID + 1
			}
			n := 0
			if err := rd.Range(r, from, 0, func(*event.RouterEvent) error { n++; return nil }); err != nil || uint64(n) != m.Cursor.LastEventID-max(from, 1)+1 {
				b.Fatalf("rank %v: %d events from %d, err %v", r, n, from, err)
			}
			if _, err := rd.Pending(r); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("log", func(b *testing.B) {
		for b.Loop() {
			replay(b, l)
		}
		b.ReportMetric(float64(b.N*len(ranks))/b.Elapsed().Seconds(), "ranks/s")
	})
	b.Run("reader", func(b *testing.B) {
		for b.Loop() {
			rd := l.NewReader()
			replay(b, rd)
			if err := rd.Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*len(ranks))/b.Elapsed().Seconds(), "ranks/s")
	})
}
