package lanes

import (
	"context"
	"fmt"
	"github.com/kvindex/kvindex/tier"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/store"
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
