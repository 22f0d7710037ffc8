package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
)

func openAdmissionEngine(t *testing.T, bound int, wait time.Duration) *Engine {
	t.Helper()
	e, err := Open(Config{DataDir: "data", FS: vfs.NewMem(), Lanes: 2, MaxIngestInFlight: bound, IngestWait: wait,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Recover(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// waitStats polls the admission counters until ok holds, failing after a deadline.
func waitStats(t *testing.T, e *Engine, what string, ok func(AdmissionStats) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(e.AdmissionStats()) {
		if time.Now().After(deadline) {
			t.Fatalf("admission: %s never happened: %+v", what, e.AdmissionStats())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAdmissionBoundedRefuses: with every slot taken, a bounded door (HTTP) is refused with
// ErrOverloaded at once (IngestWait negative) and counted; once a slot frees it is admitted.
func TestAdmissionBoundedRefuses(t *testing.T) {
	e := openAdmissionEngine(t, 1, -1)
	ctx := context.Background()
	_, release, err := e.Admit(ctx, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Admit(ctx, 1, true); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("second admit with the bound full: got %v, want ErrOverloaded", err)
	}
	if st := e.AdmissionStats(); st.Bound != 1 || st.InFlight != 1 || st.Rejected != 1 || st.Admitted != 1 || st.Waited != 1 {
		t.Fatalf("stats after one refusal: %+v", st)
	}
	release()
	release() // a second release frees nothing more
	_, release2, err := e.Admit(ctx, 1, true)
	if err != nil {
		t.Fatalf("admit after the release: %v", err)
	}
	release2()
	if st := e.AdmissionStats(); st.InFlight != 0 || st.Admitted != 2 {
		t.Fatalf("stats after both released: %+v", st)
	}
}

// TestAdmissionSourcesWait: a source's batch beyond the bound waits for the slot (it is not
// refused), and goes through once the slot frees; an ingest under an admitted context takes no
// second slot (no self-deadlock at bound 1).
func TestAdmissionSourcesWait(t *testing.T) {
	e := openAdmissionEngine(t, 1, -1)
	ctx := context.Background()
	actx, release, err := e.Admit(ctx, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	ev := event.Stored(event.Rank{WorkerID: 9}, 1, nil, event.Block{BlockHash: 1, TokensHash: 2})
	if _, err := e.Ingest(actx, defKey, []event.RouterEvent{ev}); err != nil {
		t.Fatalf("ingest under the admitted context: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Ingest(ctx, defKey, []event.RouterEvent{event.Stored(event.Rank{WorkerID: 9}, 2, nil, event.Block{BlockHash: 3, TokensHash: 4})})
		done <- err
	}()
	waitStats(t, e, "the second batch waiting", func(st AdmissionStats) bool { return st.Waiting == 1 })
	select {
	case err := <-done:
		t.Fatalf("the batch beyond the bound returned (%v) while the slot was held", err)
	default:
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the waiting batch: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting batch was not admitted after the release")
	}
	if st := e.AdmissionStats(); st.Rejected != 0 || st.Waited != 1 || st.InFlight != 0 || st.Admitted != 2 {
		t.Fatalf("stats: %+v", st)
	}
	if sc := e.Find(nil, defKey, Query{Hashes: []uint64{4}}); len(sc) != 1 || sc[0].Score != 1 || sc[0].TreeSize != 2 {
		t.Fatalf("both batches applied: scores %+v", sc)
	}
}

// TestAdmissionCountsEvents: the bound counts events; a batch larger than the bound takes all of
// it (it runs alone) instead of waiting forever.
func TestAdmissionCountsEvents(t *testing.T) {
	e := openAdmissionEngine(t, 4, -1)
	ctx := context.Background()
	_, r3, err := e.Admit(ctx, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	_, r1, err := e.Admit(ctx, 1, true)
	if err != nil {
		t.Fatalf("3 + 1 events within a bound of 4: %v", err)
	}
	if _, _, err := e.Admit(ctx, 1, true); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("a fifth event: %v, want ErrOverloaded", err)
	}
	r3()
	r1()
	_, big, err := e.Admit(ctx, 100, true)
	if err != nil {
		t.Fatalf("a batch of 100 events with a bound of 4 and nothing in flight: %v", err)
	}
	if st := e.AdmissionStats(); st.InFlight != 4 || st.Bound != 4 {
		t.Fatalf("the large batch takes the whole bound: %+v", st)
	}
	big()
}

// TestAdmissionWaitCancelled: a waiting batch whose context ends returns its error, writes
// nothing and takes no slot.
func TestAdmissionWaitCancelled(t *testing.T) {
	e := openAdmissionEngine(t, 1, time.Hour)
	_, release, err := e.Admit(context.Background(), 1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.SourceDoor().SubmitWithMeta(ctx, []event.RouterEvent{event.Stored(event.Rank{WorkerID: 9}, 1, nil, event.Block{BlockHash: 1, TokensHash: 2})}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: got %v, want context.Canceled", err)
	}
	if st := e.AdmissionStats(); st.InFlight != 1 || st.Admitted != 1 {
		t.Fatalf("stats: %+v", st)
	}
}
