package wal

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/kvindex/kvindex/event"
	"go.uber.org/goleak"
)

// heldSyncs holds every WAL sync until the test has taken its crash clone, or for at most
// hold: a Wait that returned before its batch's sync lets the test take the clone while that
// sync is still held, so the clone lacks the batch whatever the machine's speed. A correct Wait
// cannot return before the sync, so the test never waits on it: each sync is only delayed.
type heldSyncs struct {
	hold time.Duration
	mu   sync.Mutex
	open chan struct{} // closed once the clone is taken
}

func (h *heldSyncs) arm() {
	h.mu.Lock()
	h.open = make(chan struct{})
	h.mu.Unlock()
}

func (h *heldSyncs) release() {
	h.mu.Lock()
	close(h.open)
	h.mu.Unlock()
}

func (h *heldSyncs) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	if !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	h.mu.Lock()
	open := h.open
	h.mu.Unlock()
	t := time.NewTimer(h.hold)
	defer t.Stop()
	select {
	case <-open:
	case <-t.C:
	}
	return nil
}

func (h *heldSyncs) String() string { return "held WAL syncs" }

// TestStartWaitAcknowledgesOnlySyncedBatches: the path ingest commits by (Start, then Wait)
// acknowledges a batch only once its WAL write is synced: a crash (CrashClone keeps synced data
// only) right after Wait returned keeps every acknowledged event and its cursor. WAL syncs are
// held until the clone is taken (heldSyncs), so a Wait that does not wait for the sync loses the
// batch in every round. Batches waited one at a time, and started together then waited in
// reverse (the lanes' order: syncs shared).
func TestStartWaitAcknowledgesOnlySyncedBatches(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // what earlier tests left is theirs
	r := event.Rank{WorkerID: 4, DPRank: 2}
	for _, tc := range []struct {
		name   string
		rounds int
		batch  int // batches started before any is waited for
	}{
		{"one at a time", 8, 1},
		{"started together, waited in reverse", 4, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			held := &heldSyncs{hold: 50 * time.Millisecond}
			held.arm()
			st, l := openLog(t, errorfs.Wrap(mem, held), Sync)
			defer func() {
				_ = l.Close()
				if err := st.Close(); err != nil {
					t.Error(err)
				}
			}()
			next := uint64(1)
			for round := range tc.rounds {
				held.arm()
				batches := make([]*Batch, tc.batch)
				for i := range batches {
					b := l.NewBatch()
					ev := realisticEvent(r, next)
					b.Append(&ev)
					b.SetCursor(r, Cursor{LastEventID: next})
					if err := l.Start(b); err != nil {
						t.Fatalf("start event %d: %v", next, err)
					}
					batches[i] = b
					next++
				}
				for i := len(batches) - 1; i >= 0; i-- {
					if err := l.Wait(batches[i]); err != nil {
						t.Fatalf("wait: %v", err)
					}
				}
				acked := next - 1
				crashed := mem.CrashClone(vfs.CrashCloneCfg{}) // synced data only
				held.release()
				for _, b := range batches {
					b.Close()
				}
				if got := recoveredUpTo(t, crashed, r); got != acked {
					t.Fatalf("round %d: after a crash the log ends at event %d (cursor included), but events up to %d were acknowledged by Wait", round, got, acked)
				}
			}
		})
	}
}

// recoveredUpTo reopens a crashed filesystem and returns the last event id of r's log, checking
// that its ids run 1..n without a hole and that the durable cursor agrees.
func recoveredUpTo(t *testing.T, fs vfs.FS, r event.Rank) uint64 {
	t.Helper()
	st, err := openStore(t, fs)
	if err != nil {
		t.Fatalf("reopen after the crash: %v", err)
	}
	defer st.Close()
	l, err := Open(st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	if err := l.Range(r, 0, 0, func(ev *event.RouterEvent) error {
		if n++; ev.EventID != n {
			return fmt.Errorf("event %d at position %d", ev.EventID, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m, err := l.RankMeta(r)
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 && (!m.HasCursor || m.Cursor.LastEventID != n) {
		t.Fatalf("the log ends at %d, the durable cursor at %+v", n, m.Cursor)
	}
	return n
}
