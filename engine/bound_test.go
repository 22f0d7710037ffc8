package engine

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/wal"
)

// boundStream is a fleet's stream over two partitions: 8 ranks each, every rank storing 150
// conversations of 3 turns (a chain of 8 blocks, continued twice by 8 more), the first 4 blocks
// of a conversation shared by the ranks of its partition that hold it.
type boundStream struct {
	keys  []partition.Key
	ranks []event.Rank
	evs   map[partition.Key][][]event.RouterEvent // per partition: batches, in order
	qs    map[partition.Key][][]uint64            // per partition: every conversation's full path
}

func newBoundStream() *boundStream {
	s := &boundStream{
		keys: []partition.Key{partition.KeyOf("", "", ""), partition.KeyOf("llama", "east", "")},
		evs:  map[partition.Key][][]event.RouterEvent{}, qs: map[partition.Key][][]uint64{},
	}
	const ranks, convs, turns, perTurn, shared = 8, 150, 3, 8, 4
	for pi, k := range s.keys {
		for w := uint64(0); w < ranks; w++ {
			s.ranks = append(s.ranks, event.Rank{WorkerID: uint64(pi)*100 + w + 1})
		}
		ids := map[event.Rank]uint64{}
		for c := uint64(0); c < convs; c++ {
			path := make([]uint64, 0, turns*perTurn)
			for j := uint64(0); j < turns*perTurn; j++ {
				path = append(path, uint64(pi+1)<<48|c<<16|j)
			}
			s.qs[k] = append(s.qs[k], path)
			var batch []event.RouterEvent
			for w := uint64(0); w < ranks; w++ {
				if (c+w)%3 == 0 {
					continue // not every rank holds every conversation
				}
				rk := event.Rank{WorkerID: uint64(pi)*100 + w + 1}
				for turn := uint64(0); turn < turns; turn++ {
					blocks := make([]event.Block, perTurn)
					for i := range blocks {
						j := turn*perTurn + uint64(i)
						bh := path[j]
						if j >= shared {
							bh |= (w + 1) << 40 // the rank's own blocks beyond the shared prefix
						}
						blocks[i] = event.Block{BlockHash: bh, TokensHash: path[j]}
					}
					var parent *uint64
					if turn > 0 {
						p := path[turn*perTurn-1] | (w+1)<<40
						parent = &p
					}
					ids[rk]++
					batch = append(batch, event.Stored(rk, ids[rk], parent, blocks...))
				}
			}
			s.evs[k] = append(s.evs[k], batch)
		}
	}
	return s
}

// openBounded opens and recovers an engine on fs's "data" bounded by maxBytes; during the
// restart replay it calls during(e) after each rank, if set.
func openBounded(t testing.TB, fs vfs.FS, maxBytes uint64, during func(e *Engine)) *Engine {
	t.Helper()
	e, err := Open(Config{DataDir: "data", FS: fs, Lanes: 2, Durability: wal.NoSync, MaxIndexBytes: maxBytes,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var progress Progress
	if during != nil {
		progress = func(int, int, uint64) { during(e) }
	}
	if err := e.Recover(context.Background(), progress); err != nil {
		t.Fatal(err)
	}
	return e
}

// feed ingests the stream, partitions interleaved batch by batch, calling after (if set) after
// each batch.
func (s *boundStream) feed(t testing.TB, e *Engine, after func()) {
	t.Helper()
	for i := range s.evs[s.keys[0]] {
		for _, k := range s.keys {
			if _, err := e.Ingest(context.Background(), k, s.evs[k][i]); err != nil {
				t.Fatal(err)
			}
			if after != nil {
				after()
			}
		}
	}
}

// scores answers every conversation's path in every partition: partition → query → rank → score.
func (s *boundStream) scores(e *Engine) map[partition.Key][]map[event.Rank]uint32 {
	out := map[partition.Key][]map[event.Rank]uint32{}
	for _, k := range s.keys {
		for _, q := range s.qs[k] {
			m := map[event.Rank]uint32{}
			for _, sc := range e.Find(nil, k, Query{Hashes: q, DeviceOnly: true}) {
				m[event.Rank{WorkerID: sc.WorkerID, DPRank: sc.DPRank}] = sc.Score
			}
			out[k] = append(out[k], m)
		}
	}
	return out
}

// underCounts fails unless every score in got is at most want's for that rank (and no rank is
// answered that want does not answer); with exact, unless they are equal. It returns how many
// (query, rank) scores got lowered.
func underCounts(t *testing.T, what string, got, want map[partition.Key][]map[event.Rank]uint32, exact bool) int {
	t.Helper()
	lowered := 0
	for k, qs := range want {
		for i, w := range qs {
			g := got[k][i]
			for rk, sc := range g {
				if ws, ok := w[rk]; !ok || sc > ws {
					t.Fatalf("%s: %v query %d rank %v scores %d, unbounded %d (answered %v): an over-count", what, k, i, rk, sc, ws, ok)
				}
			}
			for rk, ws := range w {
				if g[rk] < ws {
					lowered++
				}
			}
			if exact && lowered > 0 {
				t.Fatalf("%s: %v query %d: %v, unbounded %v", what, k, i, g, w)
			}
		}
	}
	return lowered
}

// TestMemoryBoundHoldsThroughTheEngine: fed a stream whose index would take several times the
// bound, the engine keeps the index (by its own accounting) within 5 % of the bound after every
// batch, and ends near it (not far under: evictions shed 2 %); every score is at most the
// unbounded engine's; evictions are counted per rank and per partition (both partitions evict,
// and every rank of them). With a bound the stream never reaches, nothing is evicted and every
// score is the unbounded one. After a restart, the replay keeps the index within the bound
// after every rank, and the restarted answers are still under-counts.
func TestMemoryBoundHoldsThroughTheEngine(t *testing.T) {
	s := newBoundStream()
	free := openBounded(t, vfs.NewMem(), 0, nil)
	defer free.Close()
	s.feed(t, free, nil)
	full, _ := free.indexMemory()
	want := s.scores(free)

	t.Run("bound never reached", func(t *testing.T) {
		e := openBounded(t, vfs.NewMem(), 2*full, nil)
		defer e.Close()
		s.feed(t, e, nil)
		underCounts(t, "under the bound", s.scores(e), want, true)
		for _, k := range s.keys {
			p, _ := e.Partitions().Lookup(k)
			if n := e.Evictions(p.ID); n != 0 {
				t.Fatalf("%v: %d evictions under the bound", k, n)
			}
		}
	})

	bound := full / 3
	fs := vfs.NewMem()
	e := openBounded(t, fs, bound, nil)
	within := func(what string, e *Engine) { // also on the replay's goroutines: Errorf
		mem, b := e.indexMemory()
		if b != bound || float64(mem) > 1.05*float64(bound) {
			t.Errorf("%s: index %d B, bound %d B (reported %d): over by more than 5 %%", what, mem, bound, b)
		}
	}
	s.feed(t, e, func() { within("feeding", e) })
	mem, _ := e.indexMemory()
	t.Logf("unbounded %d B, bound %d B, bounded %d B", full, bound, mem)
	if float64(mem) < 0.9*float64(bound) {
		t.Fatalf("index %d B, bound %d B: evicted far more than needed", mem, bound)
	}
	lowered := underCounts(t, "bounded", s.scores(e), want, false)
	if lowered == 0 {
		t.Fatalf("no score lowered by a bound of a third of the index")
	}
	for _, k := range s.keys {
		p, _ := e.Partitions().Lookup(k)
		if e.Evictions(p.ID) == 0 {
			t.Fatalf("%v: nothing evicted", k)
		}
	}
	var sum uint64
	for _, rk := range s.ranks {
		p, _ := e.Partitions().Lookup(s.keys[rk.WorkerID/100])
		rk.Partition = p.ID
		n := e.RankEvictions(rk)
		if n == 0 {
			t.Fatalf("rank %v: nothing evicted (eviction is by share of every rank)", rk)
		}
		sum += n
	}
	for _, k := range s.keys {
		p, _ := e.Partitions().Lookup(k)
		sum -= e.Evictions(p.ID)
	}
	if sum != 0 {
		t.Fatalf("rank evictions and partition evictions differ by %d", int64(sum))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	replayed := 0
	again := openBounded(t, fs, bound, func(e *Engine) {
		replayed++
		within("replaying", e)
	})
	defer again.Close()
	if replayed != len(s.ranks) {
		t.Fatalf("measured after %d ranks of the replay, want %d", replayed, len(s.ranks))
	}
	within("after the restart", again)
	if mem, _ := again.indexMemory(); float64(mem) < 0.9*float64(bound) {
		t.Fatalf("restarted index %d B, bound %d B: the replay evicted far more than needed", mem, bound)
	}
	underCounts(t, "restarted", s.scores(again), want, false)
}

// TestMemoryBoundTurnsCheckpointsOff: Open with a bound and online checkpoints keeps the bound
// and turns the checkpoints off (a checkpoint would snapshot the evictions); without a bound
// they stay.
func TestMemoryBoundTurnsCheckpointsOff(t *testing.T) {
	for _, tc := range []struct {
		bound uint64
		want  float64
	}{{0, 2}, {1 << 20, 0}} {
		e, err := Open(Config{DataDir: "data", FS: vfs.NewMem(), CheckpointRatio: 2, MaxIndexBytes: tc.bound,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if e.cfg.CheckpointRatio != tc.want || e.cfg.MaxIndexBytes != tc.bound {
			t.Errorf("bound %d: checkpoint ratio %v, bound %d; want %v", tc.bound, e.cfg.CheckpointRatio, e.cfg.MaxIndexBytes, tc.want)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkIngestBounded measures ingest through the engine (NoSync, 2 lanes, MemFS) of the
// boundStream, unbounded and with a bound of a third of what the stream holds: what the store
// order and the evictions cost the write path. One op is the whole stream.
//
//	go test ./engine -run '^$' -bench BenchmarkIngestBounded -benchtime 3x
func BenchmarkIngestBounded(b *testing.B) {
	s := newBoundStream()
	var blocks int
	for _, batches := range s.evs {
		for _, batch := range batches {
			for i := range batch {
				blocks += batch[i].NumBlocks()
			}
		}
	}
	free := openBounded(b, vfs.NewMem(), 0, nil)
	s.feed(b, free, nil)
	full, _ := free.indexMemory()
	_ = free.Close()
	for _, c := range []struct {
		name  string
		bound uint64
	}{{"unbounded", 0}, {"bound=third", full / 3}} {
		b.Run(c.name, func(b *testing.B) {
			var evicted uint64
			for b.Loop() {
				b.StopTimer()
				e := openBounded(b, vfs.NewMem(), c.bound, nil)
				b.StartTimer()
				s.feed(b, e, nil)
				b.StopTimer()
				for _, p := range e.Partitions().All() {
					evicted += e.Evictions(p.ID)
				}
				_ = e.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(blocks*b.N)/b.Elapsed().Seconds(), "blocks/s")
			b.ReportMetric(float64(evicted)/float64(b.N), "evicted/op")
		})
	}
}
