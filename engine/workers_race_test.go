package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
)

// TestRecordWritesSerialize: a worker's record is written whole by several writers at once —
// its event source's batches renewing the implied lease (the clock moves a ttl per batch, so
// every batch renews), the door changing between two sources, its recovery URL set and cleared —
// and what a restart reads is what the engine held when it stopped: no write of an older value
// lands after a newer one.
func TestRecordWritesSerialize(t *testing.T) {
	fs := vfs.NewMem()
	c := newClock()
	const ttl = time.Second
	e := openSourceEngine(t, fs, c, ttl)
	ctx := context.Background()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i, door := range []Source{SourceZMQ, SourceNATS} {
		wg.Add(1)
		go func() { // an event source: Place, then the renewing door, one rank each
			defer wg.Done()
			rk := event.Rank{WorkerID: 1, DPRank: uint32(i)}
			for id := uint64(1); id <= n; id++ {
				p, err := e.Place(ctx, Placement{Door: door, Key: srcKey, Worker: 1, EventSource: true})
				if err != nil {
					errs <- err
					return
				}
				rk.Partition = p
				c.Advance(ttl)
				if _, err := e.SourceDoor().SubmitWithMeta(ctx, []event.RouterEvent{
					event.Stored(rk, id, nil, event.Block{BlockHash: id, TokensHash: id})}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			u := ""
			if i%2 == 0 {
				u = fmt.Sprintf("http://up-%d:7070", i)
			}
			if _, err := e.SetRecoverySource(ctx, 1, u); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	before, _ := e.Worker(1)
	if before.LeaseState == LeaseNone || !before.Lease.Implied || before.Placed != true {
		t.Fatalf("the worker before the restart: %+v", before)
	}
	before.LeaseState = 0 // stale or not depends on the clock only
	lastWrittenAfterRestart(t, e, fs, c, ttl, before, func(w *WorkerInfo) { w.LeaseState = 0 })
}

// TestRecordWritesLandInOrder: a write of a worker's record built first (its recovery URL) is
// held between its build and its commit while a second writer (the worker's event source,
// renewing its implied lease) tries to write the record: the second waits for the first (the
// record's wmu), so the durable record is the second's, built on the first, and a restart reads
// what the engine held. (Were the writes not serialized, the second would land first and the
// first's older lease would be what a restart reads.)
func TestRecordWritesLandInOrder(t *testing.T) {
	fs := vfs.NewMem()
	c := newClock()
	const ttl = time.Second
	e := openSourceEngine(t, fs, c, ttl)
	ctx := context.Background()
	rk := event.Rank{WorkerID: 1}
	feed := func(id uint64) error {
		p, err := e.Place(ctx, Placement{Door: SourceZMQ, Key: srcKey, Worker: 1, EventSource: true})
		if err != nil {
			return err
		}
		rk.Partition = p
		_, err = e.SourceDoor().SubmitWithMeta(ctx, []event.RouterEvent{event.Stored(rk, id, nil, event.Block{BlockHash: id, TokensHash: id})})
		return err
	}
	if err := feed(1); err != nil {
		t.Fatal(err)
	}
	secondDone := make(chan struct{})
	var held atomic.Bool
	e.testAfterBuild = func() {
		if held.CompareAndSwap(false, true) { // the first write's build: wait for the second, at most a while
			select {
			case <-secondDone:
			case <-time.After(300 * time.Millisecond):
			}
		}
	}
	first := make(chan error, 1)
	go func() {
		_, err := e.SetRecoverySource(ctx, 1, "http://first:7070")
		first <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !held.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the first write never built its record")
		}
		time.Sleep(time.Millisecond)
	}
	c.Advance(ttl) // the next batch renews the lease
	if err := feed(2); err != nil {
		t.Fatal(err)
	}
	close(secondDone)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	e.testAfterBuild = nil
	before, _ := e.Worker(1)
	if before.RecoveryURL != "http://first:7070" || !before.Lease.Deadline.Equal(c.Now().Add(ttl)) {
		t.Fatalf("the worker before the restart: %+v", before)
	}
	lastWrittenAfterRestart(t, e, fs, c, ttl, before, func(*WorkerInfo) {})
}

// lastWrittenAfterRestart closes e, opens its data again and checks that worker before.Worker's
// record (as mask leaves it) is before: the last one written.
func lastWrittenAfterRestart(t *testing.T, e *Engine, fs vfs.FS, c *clock, ttl time.Duration, before WorkerInfo, mask func(*WorkerInfo)) {
	t.Helper()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openSourceEngine(t, fs, c, ttl)
	defer e.Close()
	after, _ := e.Worker(before.Worker)
	mask(&after)
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the record read after a restart is not the last one written:\n got %+v\nwant %+v", after, before)
	}
}
