package wal

import (
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
)

// TestStartedBatchesLandInStartOrder: batches started one after the other (as a lane's decider
// starts its commits) are applied in that order whatever order their syncs are waited in, so a
// later batch's cursor is never overwritten by an earlier one's (the durable cursor always
// matches the log's last event). Both durability modes.
func TestStartedBatchesLandInStartOrder(t *testing.T) {
	for _, d := range []Durability{Sync, NoSync} {
		t.Run(d.String(), func(t *testing.T) {
			st, l := openLog(t, vfs.NewMem(), d)
			defer func() {
				_ = l.Close()
				_ = st.Close()
			}()
			r := event.Rank{WorkerID: 3, DPRank: 1}
			const n = 64
			batches := make([]*Batch, n)
			for i := range batches {
				b := l.NewBatch()
				id := uint64(i + 1)
				ev := event.Stored(r, id, nil, event.Block{BlockHash: id, TokensHash: id})
				b.Append(&ev)
				b.SetCursor(r, Cursor{LastEventID: id})
				if err := l.Start(b); err != nil {
					t.Fatalf("start %d: %v", id, err)
				}
				batches[i] = b
			}
			var wg sync.WaitGroup
			for i := n - 1; i >= 0; i-- { // waited for in reverse, concurrently
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := l.Wait(batches[i]); err != nil {
						t.Errorf("wait %d: %v", i+1, err)
					}
					batches[i].Close()
				}()
			}
			wg.Wait()
			m, err := l.RankMeta(r)
			if err != nil {
				t.Fatal(err)
			}
			if m.Cursor.LastEventID != n {
				t.Fatalf("durable cursor %d, want %d (the last started batch's)", m.Cursor.LastEventID, n)
			}
			if err := l.Wait(l.NewBatch()); err != nil { // an empty batch waits as a no-op
				t.Fatal(err)
			}
		})
	}
}
