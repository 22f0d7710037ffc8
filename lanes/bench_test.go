package lanes

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
)

// BenchmarkSubmit measures durable ingest through the pipeline (cursor → log → lane → tree) in
// events/s, next to the raw Pebble ceiling in the same run: the same encoded records, the same
// producers and batching, committed with pebble.Sync and nothing else. Each producer owns one
// rank and submits a growing chain (one block per event). Run on a real disk:
//
//	go test ./lanes -run '^$' -bench BenchmarkSubmit -benchtime 2s
func BenchmarkSubmit(b *testing.B) {
	for _, producers := range []int{1, 16} {
		for _, batch := range []int{1, 64} {
			for _, variant := range []string{"ceiling", "pipeline"} {
				b.Run(fmt.Sprintf("p=%d/batch=%d/%s", producers, batch, variant), func(b *testing.B) {
					benchSubmit(b, producers, batch, variant)
				})
			}
		}
	}
}

func chainEvents(r event.Rank, from uint64, n int) []event.RouterEvent {
	out := make([]event.RouterEvent, n)
	for i := range out {
		id := from + uint64(i)
		h := r.WorkerID<<40 | id
		var parent *uint64
		if id > 1 {
			p := h - 1
			parent = &p
		}
		out[i] = event.Stored(r, id, parent, event.Block{BlockHash: h, TokensHash: id})
	}
	return out
}

func benchSubmit(b *testing.B, producers, batch int, variant string) {
	st, err := store.Open(b.TempDir(), store.Options{Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	lg, err := wal.Open(st, wal.Options{Durability: wal.Sync, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	var p *Pipeline
	if variant == "pipeline" {
		p = New(lg, Single(tier.New(index.New(index.Options{}))), Options{Logger: quiet()})
		p.Start()
		defer p.Close()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := event.Rank{WorkerID: uint64(g + 1)}
			id := uint64(1)
			var key, val []byte
			for next.Add(int64(batch)) <= int64(b.N) {
				evs := chainEvents(r, id, batch)
				id += uint64(batch)
				if p != nil {
					if _, err := p.Submit(context.Background(), evs); err != nil {
						b.Error(err)
						return
					}
					continue
				}
				pb := st.DB().NewBatch()
				for i := range evs {
					key = store.AppendLogKey(key[:0], r, evs[i].EventID)
					val = wal.EncodeRecord(val[:0], &evs[i])
					_ = pb.Set(key, val, nil)
				}
				if err := pb.Commit(pebble.Sync); err != nil {
					b.Error(err)
				}
				pb.Close()
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkGroupGate measures the applier's cost per block of a hybrid model's stream in front of
// the tree (groups.go): a rank stores a 16-block chain and removes it, as events without group
// metadata, as one main group, as two main groups (each block stored and removed by both: the
// gate's membership) and as a main group beside a sliding-window group (whose events the lanes
// log without blocks), next to the tree alone (tree-only). ns/block counts the blocks the tree is
// asked to hold, once per block.
//
//	go test ./lanes -run '^$' -bench BenchmarkGroupGate
func BenchmarkGroupGate(b *testing.B) {
	const chain = 16
	full := event.Group{Kind: event.GroupKindFullAttention, BlockSize: 16}
	for _, variant := range []string{"tree-only", "no-metadata", "one-group", "two-groups", "full+sliding", "two-groups+kinds-of"} {
		b.Run(variant, func(b *testing.B) {
			p := &Pipeline{opts: Options{IndexedKinds: event.MainGroupKinds}}
			if variant == "two-groups+kinds-of" { // a per-rank setting looked up as the engine does (a locked map)
				var mu sync.RWMutex
				byWorker := map[uint64]event.GroupKinds{1: event.MainGroupKinds}
				p.opts.KindsOf = func(r event.Rank) event.GroupKinds {
					mu.RLock()
					defer mu.RUnlock()
					return byWorker[r.WorkerID]
				}
			}
			r := event.Rank{WorkerID: 1}
			rs := &laneRank{rank: r}
			ts := tier.New(nil)
			var groups []event.Group
			switch variant {
			case "one-group":
				groups = []event.Group{full}
			case "two-groups", "two-groups+kinds-of":
				g1 := full
				g1.Idx = 1
				groups = []event.Group{full, g1}
			case "full+sliding":
				groups = []event.Group{full, {Idx: 1, Kind: event.GroupKindSlidingWindow, SlidingWindow: 128, BlockSize: 16}}
			}
			blocks := make([]event.Block, chain)
			hashes := make([]uint64, chain)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				base := uint64(i) * chain
				for j := range blocks {
					blocks[j] = event.Block{BlockHash: base + uint64(j) + 1, TokensHash: uint64(j) + 1}
					hashes[j] = base + uint64(j) + 1
				}
				st := event.Stored(r, 0, nil, blocks...)
				rm := event.Removed(r, 0, hashes...)
				if variant == "tree-only" { // the tree without the gate in front: the baseline
					ts.Apply(&st)
					ts.Apply(&rm)
					continue
				}
				if len(groups) == 0 {
					p.applyEvent(rs, ts, &st)
					p.applyEvent(rs, ts, &rm)
					continue
				}
				for _, g := range groups {
					st.HasGroup, st.Group = true, g
					if g.Kind == event.GroupKindSlidingWindow {
						st.Blocks = nil // logged without its blocks (classify)
					}
					p.applyEvent(rs, ts, &st)
					st.Blocks = blocks
				}
				for _, g := range groups {
					rm.HasGroup, rm.Group = true, g
					if g.Kind == event.GroupKindSlidingWindow {
						rm.Removed = nil
					}
					p.applyEvent(rs, ts, &rm)
					rm.Removed = hashes
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chain), "ns/block")
		})
	}
}
