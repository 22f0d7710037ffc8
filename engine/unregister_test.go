package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/partition"
)

// TestUnregisterStopsSourcesBeforeLockingTheRecord: a registration's source that is placing its
// worker (which takes the worker's record lock: here its door was forgotten by a DELETE) when
// /unregister comes must be able to finish,
// or the source's stop waits for it under that lock forever. The stop here waits for such a
// last placement, once (a stopped source is not stopped again), and fails after 10 s instead of
// hanging the test.
func TestUnregisterStopsSourcesBeforeLockingTheRecord(t *testing.T) {
	ctx := context.Background()
	e := openTestEngine(t, vfs.NewMem(), &clock{}, 0)
	defer e.Close()
	key := partition.KeyOf("m", "", "")
	reg := Registration{DPRank: 0, Endpoint: "tcp://127.0.0.1:5557", BlockSize: 16, SourceID: "dynamo-7-0"}
	if _, err := e.Register(ctx, 7, key, reg, nil); err != nil {
		t.Fatal(err)
	}
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
