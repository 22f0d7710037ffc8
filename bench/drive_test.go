package bench

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/workload"
	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

// chunked yields evs in runs of the given sizes (the last run takes the rest).
func chunked(evs []event.RouterEvent, sizes []int) eventSource {
	return func() ([]event.RouterEvent, bool) {
		if len(evs) == 0 {
			return nil, false
		}
		k := len(evs)
		if len(sizes) > 0 {
			k, sizes = min(sizes[0], k), sizes[1:]
		}
		out := evs[:k]
		evs = evs[k:]
		return out, true
	}
}

// drive hands each producer exactly the batches of its whole stream sliced by batch, in order,
// wherever the chunks end: what a materialized stream gave it.
func TestDriveBatchesIgnoreChunkBoundaries(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // what earlier tests left is theirs
	rapid.Check(t, func(t *rapid.T) {
		producers := rapid.IntRange(1, 5).Draw(t, "producers")
		batch := rapid.IntRange(1, 7).Draw(t, "batch")
		ranks := rapid.IntRange(1, 9).Draw(t, "ranks")
		evs := make([]event.RouterEvent, rapid.IntRange(0, 120).Draw(t, "events"))
		next := map[uint64]uint64{}
		for i := range evs {
			w := uint64(rapid.IntRange(0, ranks-1).Draw(t, "worker"))
			next[w]++
			evs[i] = event.Cleared(event.Rank{WorkerID: w}, next[w])
		}
		sizes := rapid.SliceOfN(rapid.IntRange(0, 30), 0, 10).Draw(t, "chunks")
		ref := newSplit(producers)
		ref.add(evs)

		r := &run{o: Options{Producers: producers}, lg: quiet()}
		var mu sync.Mutex
		got := make([][][]event.RouterEvent, producers)
		submit := func(_ context.Context, b []event.RouterEvent) error {
			p := ref.owner[b[0].Rank()]
			mu.Lock()
			got[p] = append(got[p], slices.Clone(b))
			mu.Unlock()
			return nil
		}
		if _, err := r.drive(context.Background(), chunked(evs, sizes), driveOpts{what: "test", submit: submit, batch: batch}); err != nil {
			t.Fatalf("drive: %v", err)
		}
		for p, q := range ref.queues {
			var want [][]event.RouterEvent
			for n := 0; n < len(q); n += batch {
				want = append(want, q[n:min(n+batch, len(q))])
			}
			if !reflect.DeepEqual(got[p], want) {
				t.Fatalf("producer %d: batches %v, want %v", p, got[p], want)
			}
		}
	})
}

var errSubmit = errors.New("submit failed")

func TestDriveStopsAtTheFirstError(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // what earlier tests left is theirs
	evs := make([]event.RouterEvent, 200)
	for i := range evs {
		evs[i] = event.Cleared(event.Rank{WorkerID: uint64(i % 8)}, uint64(i/8+1))
	}
	for _, tc := range []struct {
		name   string
		failAt int // submit call that fails
		cancel bool
	}{
		{"first batch", 0, false},
		{"later chunk", 30, false},
		{"cancelled", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			var mu sync.Mutex
			calls := 0
			submit := func(context.Context, []event.RouterEvent) error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				if calls-1 == tc.failAt {
					return fmt.Errorf("batch %d: %w", tc.failAt, errSubmit)
				}
				return nil
			}
			r := &run{o: Options{Producers: 4}, lg: quiet()}
			_, err := r.drive(ctx, chunked(evs, []int{50, 50, 50}), driveOpts{what: "test", submit: submit, batch: 2})
			want := errSubmit
			if tc.cancel {
				want = context.Canceled
			}
			if !errors.Is(err, want) {
				t.Fatalf("drive: %v, want %v", err, want)
			}
		})
	}
}

// The sample is every non-empty query when there are at most Options.Queries of them, else that
// many evenly spaced ones, in stream order, each the stream's own query.
func TestDrawSample(t *testing.T) {
	reqs := smallTrace(t, 120)
	wopts := workload.WorkloadOptions{Workers: 4, CacheBlocks: 32}
	st, err := workload.NewStream(reqs, 3, wopts)
	if err != nil {
		t.Fatal(err)
	}
	wl, err := workload.Generate(reqs, 3, wopts)
	if err != nil {
		t.Fatal(err)
	}
	all := nonEmpty(wl.Queries)
	for _, n := range []int{-1, 1, 7, len(all) - 1, len(all), len(all) + 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			r := &run{o: Options{Queries: n}, st: st, rep: &Report{}}
			r.drawSample()
			want := len(all)
			if n > 0 {
				want = min(n, len(all))
			}
			if len(r.sample) != want || !slices.IsSorted(r.sampleAt) {
				t.Fatalf("%d sampled (at %v), want %d in order", len(r.sample), r.sampleAt, want)
			}
			if want == len(all) && !slices.Equal(r.sampleAt, all) {
				t.Fatalf("sample %v, want every non-empty query %v", r.sampleAt, all)
			}
			for j, q := range r.sampleAt {
				if !slices.Contains(all, q) || !reflect.DeepEqual(r.sample[j], wl.Queries[q]) {
					t.Fatalf("sample %d is query %d: %+v, the stream's %+v", j, q, r.sample[j], wl.Queries[q])
				}
				if j > 0 && r.sampleAt[j] == r.sampleAt[j-1] {
					t.Fatalf("query %d sampled twice", q)
				}
			}
			if v, _ := r.rep.Get(MetricSampledQueries); v != float64(len(all)) {
				t.Fatalf("%s = %v, want %d", MetricSampledQueries, v, len(all))
			}
		})
	}
}

// Stage 4's check on the sample: identical indexes pass; an index that lost a block fails with
// a *MismatchError naming the first query that reaches it.
func TestSampleAnswersCatchALostBlock(t *testing.T) {
	reqs := smallTrace(t, 60)
	st, err := workload.NewStream(reqs, 2, workload.WorkloadOptions{Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	before, after := index.New(index.Options{}), index.New(index.Options{})
	rd := st.Reader()
	var last event.RouterEvent
	for {
		ch, ok := rd.Next(64, false)
		if !ok {
			break
		}
		for i := range ch.Events {
			before.Apply(&ch.Events[i])
			after.Apply(&ch.Events[i])
			if ch.Events[i].Kind == event.KindStored {
				last = ch.Events[i]
			}
		}
	}
	r := &run{o: Options{Queries: -1}, st: st, rep: &Report{}}
	r.drawSample()
	ctx := context.Background()
	if err := r.answers(ctx, before).compare(ctx, after); err != nil {
		t.Fatalf("identical indexes differ: %v", err)
	}
	lost := event.Removed(last.Rank(), last.EventID+1_000_000, last.Blocks[len(last.Blocks)-1].BlockHash)
	if res := after.Apply(&lost); res.Status != index.StatusOK {
		t.Fatalf("removing %v: %v", lost, res.Status)
	}
	err = r.answers(ctx, before).compare(ctx, after)
	var me *MismatchError
	if !errors.As(err, &me) || !errors.Is(err, ErrScoresDiffer) {
		t.Fatalf("err = %v, want a *MismatchError", err)
	}
	if !slices.Contains(r.sampleAt, me.Query) || len(me.Hashes) == 0 {
		t.Fatalf("mismatch names query %d (%d hashes), not a sampled one", me.Query, len(me.Hashes))
	}
}

func TestStatusKB(t *testing.T) {
	status := []byte("Name:\tkvindex\nVmPeak:\t  900 kB\nVmHWM:\t  12345 kB\nVmRSS:\t 100 kB\n")
	for _, tc := range []struct {
		status, name string
		want         uint64
		ok           bool
	}{
		{string(status), "VmHWM:", 12345 << 10, true},
		{string(status), "VmRSS:", 100 << 10, true},
		{string(status), "VmSwap:", 0, false},
		{"VmHWM:\t12 MB\n", "VmHWM:", 0, false},
		{"VmHWM:\tx kB\n", "VmHWM:", 0, false},
	} {
		if got, ok := statusKB([]byte(tc.status), tc.name); got != tc.want || ok != tc.ok {
			t.Errorf("statusKB(%q, %s) = %d, %v; want %d, %v", tc.status, tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
