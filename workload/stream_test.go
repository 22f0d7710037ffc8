package workload

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// checkStreamEquals reads s in chunks of drawn sizes and fails unless it is wl, event for event
// and query for query, with Generate's counts; every query is also checked through Query.
func checkStreamEquals(t fataler, s *Stream, wl *Workload, chunk func() int) {
	if s.Events() != len(wl.Events) || s.Blocks() != wl.Blocks || s.Queries() != len(wl.Queries) {
		t.Fatalf("stream sizes: %d events, %d blocks, %d queries; Generate: %d, %d, %d",
			s.Events(), s.Blocks(), s.Queries(), len(wl.Events), wl.Blocks, len(wl.Queries))
	}
	if s.RoutingHitRatio() != wl.RoutingHitRatio {
		t.Fatalf("routing hit ratio %v, Generate %v", s.RoutingHitRatio(), wl.RoutingHitRatio)
	}
	var top uint64
	for i := range wl.Events {
		top = max(top, wl.Events[i].WorkerID)
	}
	if s.MaxWorkerID() != top {
		t.Fatalf("max worker id %d, Generate's stream %d", s.MaxWorkerID(), top)
	}
	rd := s.Reader()
	ne, q, pos := 0, 0, 0
	for n := 0; ; n++ {
		max := chunk()
		ch, ok := rd.Next(max, true)
		if !ok {
			break
		}
		if ch.FirstEvent != pos {
			t.Fatalf("chunk %d starts at event %d, want %d", n, ch.FirstEvent, pos)
		}
		pos += len(ch.Events)
		for i := range ch.Events {
			j := ch.FirstEvent + i
			if j >= len(wl.Events) || !sameEvent(ch.Events[i], wl.Events[j]) {
				t.Fatalf("chunk %d: event %d = %+v, Generate's %+v", n, j, ch.Events[i], at(wl, j))
			}
		}
		for _, cq := range ch.Queries {
			if q >= len(wl.Queries) || !reflect.DeepEqual(cq, wl.Queries[q]) {
				t.Fatalf("chunk %d: query %d = %+v, Generate's %+v", n, q, cq, wl.Queries[q])
			}
			if cq.AfterEvent < ch.FirstEvent || cq.AfterEvent > ch.FirstEvent+len(ch.Events) {
				t.Fatalf("chunk %d (events %d…%d): query %d asked after event %d", n, ch.FirstEvent, ch.FirstEvent+len(ch.Events), q, cq.AfterEvent)
			}
			if got := s.Query(q); !reflect.DeepEqual(got, wl.Queries[q]) {
				t.Fatalf("Query(%d) = %+v, Generate's %+v", q, got, wl.Queries[q])
			}
			if len(cq.BlockHashes) > 0 {
				if got := s.NonEmpty(ne); got != q {
					t.Fatalf("NonEmpty(%d) = %d, want %d", ne, got, q)
				}
				ne++
			}
			q++
		}
		if len(ch.Events) == 0 && len(ch.Queries) == 0 {
			t.Fatalf("chunk %d is empty", n)
		}
	}
	if pos != len(wl.Events) {
		t.Fatalf("read %d events of %d", pos, len(wl.Events))
	}
	if q != len(wl.Queries) || ne != s.NonEmptyQueries() {
		t.Fatalf("read %d queries (%d non-empty) of %d (%d)", q, ne, len(wl.Queries), s.NonEmptyQueries())
	}
}

func at(wl *Workload, j int) any {
	if j < len(wl.Events) {
		return wl.Events[j]
	}
	return "past the end"
}

// The streamed stream is the materialized one, for any trace, options, scale and chunk sizes,
// with and without a host tier.
func TestStreamEqualsGenerate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reqs := genTrace(t)
		opts := genOptions(t)
		opts.HostBlocks = rapid.SampledFrom([]int{0, 0, 1, 5}).Draw(t, "host_blocks")
		scale := rapid.IntRange(1, 4).Draw(t, "scale")
		before := cloneRequests(reqs)
		wl, err := Generate(reqs, scale, opts)
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		s, err := NewStream(reqs, scale, opts)
		if err != nil {
			t.Fatalf("NewStream: %v", err)
		}
		if !reflect.DeepEqual(reqs, before) {
			t.Fatalf("NewStream modified its input")
		}
		read := 0
		checkStreamEquals(t, s, wl, func() int {
			read++
			return rapid.IntRange(0, 12).Draw(t, fmt.Sprintf("chunk_%d", read))
		})
		// A second reader starts over: the stream itself does not move.
		checkStreamEquals(t, s, wl, func() int { return 1 << 20 })
	})
}

// The figures docs/BENCHMARKS.md reports at --scale 8 (events, blocks, routing hit ratio) come
// out of the stream as out of Generate: the real trace, event for event.
func TestStreamEqualsGenerateRealTraceScale8(t *testing.T) {
	if testing.Short() {
		t.Skip("scale 8 of the real trace: skipped with -short")
	}
	reqs := loadRealTrace(t)
	wl, err := Generate(reqs, 8, WorkloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStream(reqs, 8, WorkloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(wl.Events) != 137_896 || wl.Blocks != 2_488_824 {
		t.Fatalf("Generate at scale 8: %d events, %d blocks (docs/BENCHMARKS.md: 137,896 and 2,488,824)", len(wl.Events), wl.Blocks)
	}
	sizes := []int{1 << 16, 1, 4097}
	n := 0
	checkStreamEquals(t, s, wl, func() int { n++; return sizes[n%len(sizes)] })
}

// A stream of a materialized workload (a workload dir) is that workload, chunk by chunk.
func TestStreamOf(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reqs := genTrace(t)
		opts := genOptions(t)
		wl, err := Generate(reqs, rapid.IntRange(1, 3).Draw(t, "scale"), opts)
		if err != nil {
			t.Fatalf("Generate: %v", err)
		}
		// A workload dir's queries need not be one per request: drop some.
		keep := rapid.SliceOfN(rapid.Bool(), len(wl.Queries), len(wl.Queries)).Draw(t, "keep")
		qs := wl.Queries
		wl.Queries = nil
		for i, k := range keep {
			if k {
				wl.Queries = append(wl.Queries, qs[i])
			}
		}
		s := StreamOf(wl)
		rd := s.Reader()
		var evs []int
		var got []Query
		for {
			ch, ok := rd.Next(rapid.IntRange(0, 7).Draw(t, "chunk"), true)
			if !ok {
				break
			}
			for _, q := range ch.Queries {
				if q.AfterEvent < ch.FirstEvent || q.AfterEvent > ch.FirstEvent+len(ch.Events) {
					t.Fatalf("query after event %d in chunk %d…%d", q.AfterEvent, ch.FirstEvent, ch.FirstEvent+len(ch.Events))
				}
			}
			for i := range ch.Events {
				if !sameEvent(ch.Events[i], wl.Events[ch.FirstEvent+i]) {
					t.Fatalf("event %d differs", ch.FirstEvent+i)
				}
				evs = append(evs, ch.FirstEvent+i)
			}
			got = append(got, ch.Queries...)
		}
		if len(evs) != len(wl.Events) || !slices.IsSorted(evs) {
			t.Fatalf("read events %v of %d", evs, len(wl.Events))
		}
		if !reflect.DeepEqual(got, wl.Queries) && len(got)+len(wl.Queries) > 0 {
			t.Fatalf("queries %+v, want %+v", got, wl.Queries)
		}
		for q := range s.Queries() {
			if !reflect.DeepEqual(s.Query(q), wl.Queries[q]) {
				t.Fatalf("Query(%d) differs", q)
			}
		}
	})
}

func TestNewStreamRefuses(t *testing.T) {
	reqs := []Request{{HashIDs: []uint64{1, ScaleOffset}}}
	for _, tc := range []struct {
		name  string
		reqs  []Request
		scale int
		opts  WorkloadOptions
		want  error
	}{
		{"scale 0", nil, 0, WorkloadOptions{}, ErrScale},
		{"ids overlap the next copy", reqs, 2, WorkloadOptions{}, ErrScale},
		{"negative workers", nil, 1, WorkloadOptions{Workers: -1}, ErrBadOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewStream(tc.reqs, tc.scale, tc.opts); !errors.Is(err, tc.want) {
				t.Fatalf("NewStream: %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := NewStream(reqs, 1, WorkloadOptions{}); err != nil {
		t.Fatalf("scale 1 may use any id: %v", err)
	}
}
