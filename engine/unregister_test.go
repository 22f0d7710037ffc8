package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// registeredSeven is an engine (closed at cleanup) with instance 7's dp rank 0 registered in
// partition m.
func registeredSeven(t *testing.T) (*Engine, partition.Key) {
	t.Helper()
	e := openTestEngine(t, vfs.NewMem(), &clock{}, 0)
	t.Cleanup(func() { _ = e.Close() })
	key := partition.KeyOf("m", "", "")
	reg := Registration{DPRank: 0, Endpoint: "tcp://127.0.0.1:5557", BlockSize: 16, SourceID: "dynamo-7-0"}
	if _, err := e.Register(context.Background(), 7, key, reg, 0, nil); err != nil {
		t.Fatal(err)
	}
	return e, key
}

// TestStoppedSourceGivesUpTheRecordLock: an event source waiting for its worker's record (to
// place the worker, or to submit) while another writer holds it gives up once the source is
// stopped (its context cancelled). /unregister stops a registration's source with the record
// held: a source started after /unregister's first, unlocked stop (a /register racing it) would
// otherwise be waited for under the lock it waits for, for ever.
func TestStoppedSourceGivesUpTheRecordLock(t *testing.T) {
	ctx := context.Background()
	e, key := registeredSeven(t)
	rk := event.Rank{WorkerID: 7}
	pid, _ := e.WorkerPartition(7, &key)
	batch := []event.RouterEvent{event.Stored(rk, 1, nil, event.Block{BlockHash: 1, TokensHash: 1})}
	batch[0].Partition = pid
	for _, tc := range []struct {
		name string
		wait func(ctx context.Context) error
	}{
		{"place", func(ctx context.Context) error { // a new kinds setting: the record is rewritten
			_, err := e.Place(ctx, Placement{Door: SourceDynamo, Key: key, Worker: 7, EventSource: true, Kinds: event.GroupKinds(0).With(event.GroupKindFullAttention)})
			return err
		}},
		{"submit", func(ctx context.Context) error {
			_, err := e.SourceDoor().SubmitWithMeta(ctx, batch)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.lockRec(7, false) // the record held, as /unregister holds it
			defer rec.wmu.Unlock()
			sctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- tc.wait(sctx) }()
			stop()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("the stopped source's wait ended with %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the stopped source still waits for the record after 10 s")
			}
		})
	}
}

// TestUnregisterStopsSourcesBeforeLockingTheRecord: a registration's source that is placing its
// worker (which takes the worker's record lock: here its door was forgotten by a DELETE) when
// /unregister comes must be able to finish,
// or the source's stop waits for it under that lock forever. The stop here waits for such a
// last placement, once (a stopped source is not stopped again), and fails after 10 s instead of
// hanging the test.
func TestUnregisterStopsSourcesBeforeLockingTheRecord(t *testing.T) {
	ctx := context.Background()
	e, key := registeredSeven(t)
	// DELETE /v1/workers/7: the registration stays, the door is forgotten, so the source's next
	// placement writes the record again (under its lock).
	if _, err := e.Remove(ctx, 7, nil); err != nil {
		t.Fatal(err)
	}
	stops := 0
	stop := func(regs []Registration, _ MetaBatch) error {
		if stops++; stops > 1 {
			return nil // stopped already
		}
		done := make(chan error, 1)
		go func() { // the source's last batch places its worker before the source exits
			_, err := e.Place(ctx, Placement{Door: SourceDynamo, Key: key, Worker: 7, EventSource: true})
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("the source's last placement waited 10 s for the record's lock")
		}
	}
	out, err := e.Unregister(ctx, 7, "m", "", nil, stop)
	if err != nil || out.Registrations != 1 {
		t.Fatalf("unregister: %+v, %v", out, err)
	}
	if w, _ := e.Worker(7); len(w.Registrations) != 0 {
		t.Fatalf("worker 7 still registered: %+v", w)
	}
}

// TestRemoveBetweenPlaceAndSubmitRefusesTheBatch: a worker removed (DELETE, the lease sweep)
// after an event source placed its batch and before the source submits it: the batch is refused
// (ErrPlacementChanged) and writes nothing, so no rank lands in the partition the removal
// dropped; the source's next batch places the worker again, and is applied. Both with and
// without implied leases (the two submit paths).
func TestRemoveBetweenPlaceAndSubmitRefusesTheBatch(t *testing.T) {
	for _, lease := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprintf("source-lease=%v", lease), func(t *testing.T) {
			ctx := context.Background()
			e, err := Open(Config{DataDir: "data", FS: vfs.NewMem(), Lanes: 2, SourceLease: lease,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if err := e.Recover(ctx, nil); err != nil {
				t.Fatal(err)
			}
			key := partition.KeyOf("m", "", "")
			place := func() uint32 {
				id, err := e.Place(ctx, Placement{Door: SourceZMQ, Key: key, Worker: 1, EventSource: true})
				if err != nil {
					t.Fatal(err)
				}
				return id
			}
			stored := func(part uint32, id uint64) []event.RouterEvent {
				ev := event.Stored(event.Rank{Partition: part, WorkerID: 1}, id, nil, event.Block{BlockHash: 100 + id, TokensHash: 10 + id})
				return []event.RouterEvent{ev}
			}
			part := place()
			if _, err := e.SourceDoor().SubmitWithMeta(ctx, stored(part, 1)); err != nil {
				t.Fatal(err)
			}
			part = place()                                   // the next batch is placed ...
			if _, err := e.Remove(ctx, 1, nil); err != nil { // ... then the worker is removed
				t.Fatal(err)
			}
			_, err = e.SourceDoor().SubmitWithMeta(ctx, stored(part, 2))
			if !errors.Is(err, ErrPlacementChanged) {
				t.Fatalf("submit after the removal: %v, want ErrPlacementChanged", err)
			}
			if st := e.Status(); len(st) != 0 {
				t.Fatalf("ranks after the refused batch: %+v, want none", st)
			}
			part = place()
			if _, err := e.SourceDoor().SubmitWithMeta(ctx, stored(part, 3)); err != nil {
				t.Fatal(err)
			}
			if st := e.Status(); len(st) != 1 || e.keyOf(st[0].Rank.Partition) != key {
				t.Fatalf("ranks after the source placed again: %+v, want worker 1's in m", st)
			}
		})
	}
}

// TestRefusedRegisterLeavesNoWorker: a /register refused (here: a block size other than its
// partition's) leaves no record of the instance behind: Workers does not list a phantom.
func TestRefusedRegisterLeavesNoWorker(t *testing.T) {
	ctx := context.Background()
	e := openTestEngine(t, vfs.NewMem(), &clock{}, 0)
	defer e.Close()
	key := partition.KeyOf("m", "", "")
	if _, err := e.Place(ctx, Placement{Door: SourceHTTP, Key: key, BlockSize: 16, Worker: 1}); err != nil {
		t.Fatal(err)
	}
	reg := Registration{DPRank: 0, Endpoint: "tcp://127.0.0.1:5557", BlockSize: 32, SourceID: "dynamo-9-0"}
	if _, err := e.Register(ctx, 9, key, reg, 0, nil); !errors.Is(err, partition.ErrBlockSizeMismatch) {
		t.Fatalf("register with another block size: %v, want ErrBlockSizeMismatch", err)
	}
	if w, known := e.Worker(9); known {
		t.Fatalf("a refused registration left worker 9: %+v", w)
	}
	for _, w := range e.Workers() {
		if w.Worker == 9 {
			t.Fatalf("Workers lists the refused instance: %+v", w)
		}
	}
}
