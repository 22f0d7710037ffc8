package recovery

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts an upstream whose handler is h and a Fetcher (tiny backoff) pointed at it.
func serve(t *testing.T, opts FetcherOptions, h http.HandlerFunc) (*Fetcher, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	tr := &http.Transport{}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	opts.Client = &http.Client{Transport: tr}
	if opts.BaseBackoff == 0 {
		opts.BaseBackoff = time.Millisecond
	}
	return NewFetcher(opts), srv.URL + "/"
}

func writeAnswer(t *testing.T, w http.ResponseWriter, a Answer) {
	w.Header().Set("Content-Type", "application/json")
	if err := EncodeAnswer(w, &a); err != nil {
		t.Error(err)
	}
}

func u64(v uint64) *uint64 { return &v }

func TestFetchShapesAndQuery(t *testing.T) {
	stored := event.Stored(testRank, 12, nil, event.Block{BlockHash: maxU64, TokensHash: 3})
	for _, tc := range []struct {
		name      string
		start     *uint64
		limit     int
		wantQuery string
		answer    Answer
	}{
		{"events", u64(12), 0, "start=12", Answer{Kind: AnswerEvents, Events: []event.RouterEvent{stored}, LastEventID: 12}},
		{"tree dump for a full restore", nil, 0, "", Answer{Kind: AnswerTreeDump, Events: []event.RouterEvent{stored}, LastEventID: 40}},
		{"too new", u64(50), 100, "limit=100&start=50", Answer{Kind: AnswerTooNew, RequestedStart: 50, RequestedEnd: 40, NewestAvailable: 40}},
		{"invalid range", u64(5), 0, "start=5", Answer{Kind: AnswerInvalidRange, StartID: 5, EndID: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, base := serve(t, FetcherOptions{}, func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Path != "/v1/ranks/7/1/events" || r.URL.RawQuery != tc.wantQuery {
					t.Errorf("request %s %s?%s", r.Method, r.URL.Path, r.URL.RawQuery)
				}
				writeAnswer(t, w, tc.answer)
			})
			got, err := f.Fetch(context.Background(), base, testRank, tc.start, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != tc.answer.Kind || got.LastEventID != tc.answer.LastEventID || len(got.Events) != len(tc.answer.Events) ||
				got.NewestAvailable != tc.answer.NewestAvailable || got.StartID != tc.answer.StartID {
				t.Fatalf("got %+v, want %+v", got, tc.answer)
			}
		})
	}
}

// logServer serves the range route over ids [oldest, newest] of testRank, honouring limit,
// answering a TreeDump below oldest and TooNew above newest.
func logServer(t *testing.T, oldest, newest uint64, calls *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		start, err := strconv.ParseUint(r.URL.Query().Get("start"), 10, 64)
		if err != nil {
			writeAnswer(t, w, Answer{Kind: AnswerTreeDump, LastEventID: newest})
			return
		}
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		switch {
		case start > newest:
			writeAnswer(t, w, Answer{Kind: AnswerTooNew, RequestedStart: start, RequestedEnd: newest, NewestAvailable: newest})
			return
		case start < oldest:
			writeAnswer(t, w, Answer{Kind: AnswerTreeDump, LastEventID: newest})
			return
		}
		a := Answer{Kind: AnswerEvents}
		for id := start; id <= newest && (limit == 0 || len(a.Events) < limit); id++ {
			a.Events = append(a.Events, event.Stored(testRank, id, nil))
			a.LastEventID = id
		}
		writeAnswer(t, w, a)
	}
}

func TestFetchPaging(t *testing.T) {
	for _, tc := range []struct {
		name           string
		oldest, newest uint64
		start          uint64
		limit          int
		wantKind       AnswerKind
		wantFirst      uint64
		wantLast       uint64
		wantCalls      int32
	}{
		{"short last page", 1, 25, 3, 10, AnswerEvents, 3, 25, 3},
		{"exact pages end with TooNew", 1, 20, 1, 10, AnswerEvents, 1, 20, 3},
		{"one page", 1, 5, 2, 10, AnswerEvents, 2, 5, 1},
		{"no limit, no paging", 1, 25, 3, 0, AnswerEvents, 3, 25, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			f, base := serve(t, FetcherOptions{}, logServer(t, tc.oldest, tc.newest, &calls))
			got, err := f.Fetch(context.Background(), base, testRank, &tc.start, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != tc.wantKind || got.LastEventID != tc.wantLast || calls.Load() != tc.wantCalls {
				t.Fatalf("got %v last=%d after %d calls, want %v last=%d after %d", got.Kind, got.LastEventID, calls.Load(), tc.wantKind, tc.wantLast, tc.wantCalls)
			}
			for i, ev := range got.Events {
				if ev.EventID != tc.wantFirst+uint64(i) {
					t.Fatalf("event %d has id %d", i, ev.EventID)
				}
			}
			if n := uint64(len(got.Events)); n != tc.wantLast-tc.wantFirst+1 {
				t.Fatalf("%d events", n)
			}
		})
	}
}

// A range compacted between two pages: the TreeDump of the later page is the answer.
func TestFetchPagingTreeDumpWins(t *testing.T) {
	var calls atomic.Int32
	f, base := serve(t, FetcherOptions{}, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			logServer(t, 1, 30, &atomic.Int32{})(w, r)
			return
		}
		writeAnswer(t, w, Answer{Kind: AnswerTreeDump, LastEventID: 30})
	})
	got, err := f.Fetch(context.Background(), base, testRank, u64(1), 10)
	if err != nil || got.Kind != AnswerTreeDump || got.LastEventID != 30 {
		t.Fatalf("got %v last=%d err=%v", got.Kind, got.LastEventID, err)
	}
}

func TestFetchRetries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failFirst int32 // answers before the first success
		status    int
		tries     int
		wantCalls int32
		wantErr   []error // nil: success
	}{
		{"503 then success", 2, http.StatusServiceUnavailable, 8, 3, nil},
		{"429 then success", 1, http.StatusTooManyRequests, 8, 2, nil},
		{"gives up after tries", 100, http.StatusInternalServerError, 4, 4, []error{ErrGaveUp, ErrUpstreamStatus}},
		{"404 is not retried", 100, http.StatusNotFound, 8, 1, []error{ErrUpstreamStatus}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			f, base := serve(t, FetcherOptions{Tries: tc.tries}, func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) <= tc.failFirst {
					http.Error(w, `{"error":"busy"}`, tc.status)
					return
				}
				writeAnswer(t, w, Answer{Kind: AnswerTreeDump, LastEventID: 3})
			})
			got, err := f.Fetch(context.Background(), base, testRank, nil, 0)
			if calls.Load() != tc.wantCalls {
				t.Fatalf("%d calls, want %d", calls.Load(), tc.wantCalls)
			}
			if tc.wantErr == nil {
				if err != nil || got.Kind != AnswerTreeDump {
					t.Fatalf("got %v, %v", got.Kind, err)
				}
				return
			}
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Fatalf("err %v does not wrap %v", err, want)
				}
			}
			if got.Kind != AnswerFailed || !errors.Is(got.Err, tc.wantErr[0]) {
				t.Fatalf("answer %+v", got)
			}
			if tc.status == http.StatusNotFound && errors.Is(err, ErrGaveUp) {
				t.Fatal("a 404 counted as retried")
			}
		})
	}
}

func TestFetchTransportErrorRetried(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	base := srv.URL
	srv.Close() // connection refused from now on
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	f := NewFetcher(FetcherOptions{Client: &http.Client{Transport: tr}, Tries: 3, BaseBackoff: time.Millisecond})
	_, err := f.Fetch(context.Background(), base, testRank, nil, 0)
	if !errors.Is(err, ErrGaveUp) || errors.Is(err, ErrUpstreamStatus) {
		t.Fatalf("err %v", err)
	}
}

func TestFetchRejectsBadAnswers(t *testing.T) {
	other := event.Stored(event.Rank{WorkerID: 8}, 3, nil)
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
	}{
		{"other rank", func(w http.ResponseWriter, r *http.Request) {
			writeAnswer(t, w, Answer{Kind: AnswerEvents, Events: []event.RouterEvent{other}, LastEventID: 3})
		}},
		{"garbage", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"Events":{"events":"x"}}`)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			f, base := serve(t, FetcherOptions{}, func(w http.ResponseWriter, r *http.Request) { calls.Add(1); tc.h(w, r) })
			_, err := f.Fetch(context.Background(), base, testRank, u64(3), 0)
			if !errors.Is(err, ErrBadAnswer) || calls.Load() != 1 {
				t.Fatalf("err %v after %d calls", err, calls.Load())
			}
		})
	}
}

func TestFetchConcurrencyLimit(t *testing.T) {
	const limit, fetches = 3, 10
	var inflight, peak atomic.Int32
	f, base := serve(t, FetcherOptions{MaxConcurrent: limit}, func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		// Hold the answer until the limit was reached once (then it stays reached): the fetches
		// overlap up to the limit whatever the machine's speed. Then hold it a little longer, so
		// that a fetcher ignoring its limit lets more in.
		for deadline := time.Now().Add(10 * time.Second); peak.Load() < limit; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("only %d fetches at once after 10 s, limit %d", peak.Load(), limit)
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		inflight.Add(-1)
		writeAnswer(t, w, Answer{Kind: AnswerTreeDump})
	})
	var wg sync.WaitGroup
	for range fetches {
		wg.Go(func() {
			if _, err := f.Fetch(context.Background(), base, testRank, nil, 0); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if peak.Load() > limit {
		t.Fatalf("%d fetches at once, limit %d", peak.Load(), limit)
	}
	if peak.Load() != limit {
		t.Fatalf("peak %d: fetches did not overlap up to the limit %d", peak.Load(), limit)
	}
}

func TestFetchHonoursContext(t *testing.T) {
	t.Run("while the upstream hangs", func(t *testing.T) {
		release := make(chan struct{})
		f, base := serve(t, FetcherOptions{}, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		defer close(release)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Millisecond, cancel)
		a, err := f.Fetch(ctx, base, testRank, nil, 0)
		if !errors.Is(err, context.Canceled) || a.Kind != AnswerFailed {
			t.Fatalf("got %v, %v", a.Kind, err)
		}
	})
	t.Run("while backing off", func(t *testing.T) {
		f, base := serve(t, FetcherOptions{BaseBackoff: time.Hour}, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "down", http.StatusBadGateway)
		})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Millisecond, cancel)
		_, err := f.Fetch(ctx, base, testRank, nil, 0)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrUpstreamStatus) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("while waiting for a slot", func(t *testing.T) {
		release := make(chan struct{})
		f, base := serve(t, FetcherOptions{MaxConcurrent: 1}, func(w http.ResponseWriter, r *http.Request) {
			<-release
			writeAnswer(t, w, Answer{Kind: AnswerTreeDump})
		})
		done := make(chan error)
		go func() {
			_, err := f.Fetch(context.Background(), base, testRank, nil, 0)
			done <- err
		}()
		for deadline := time.Now().Add(10 * time.Second); len(f.sem) == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the first fetch did not take the only slot within 10 s")
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := f.Fetch(ctx, base, testRank, nil, 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v", err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// TestFetchSendsAuthToken checks the rule "the fetcher sends FetcherOptions.AuthToken as a bearer
// token on every request, and no Authorization header without one".
func TestFetchSendsAuthToken(t *testing.T) {
	for _, tc := range []struct{ token, want string }{{"s3cret", "Bearer s3cret"}, {"", ""}} {
		var got atomic.Value
		f, base := serve(t, FetcherOptions{AuthToken: tc.token}, func(w http.ResponseWriter, r *http.Request) {
			got.Store(r.Header.Get("Authorization"))
			writeAnswer(t, w, Answer{Kind: AnswerTreeDump})
		})
		if _, err := f.Fetch(context.Background(), base, testRank, nil, 0); err != nil {
			t.Fatal(err)
		}
		if g, _ := got.Load().(string); g != tc.want {
			t.Errorf("token %q: Authorization %q, want %q", tc.token, g, tc.want)
		}
	}
}

// Seam: recovery in a non-default partition. Partition ids are local to a process: the fetch
// names the rank's partition by its names and keeps the local id on the answer's events, both
// for a full restore (TreeDump) and for a range.
func TestFetchNamesAndKeepsThePartition(t *testing.T) {
	local := event.Rank{Partition: 3, WorkerID: 5, DPRank: 0}
	upstream := event.Rank{WorkerID: 5, DPRank: 0} // the upstream's answer carries no partition
	stored := event.Stored(upstream, 7, nil, event.Block{BlockHash: 11, TokensHash: 12})
	names := func(id uint32) (string, string, bool) { return "llama", "default", id == 3 }
	for _, tc := range []struct {
		name      string
		start     *uint64
		wantQuery string
		kind      AnswerKind
	}{
		{"full restore", nil, "model_name=llama&routing_group=default", AnswerTreeDump},
		{"range", u64(7), "model_name=llama&routing_group=default&start=7", AnswerEvents},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, base := serve(t, FetcherOptions{Partition: names}, func(w http.ResponseWriter, r *http.Request) {
				if got := r.URL.RawQuery; got != tc.wantQuery {
					t.Errorf("query %q, want %q", got, tc.wantQuery)
				}
				writeAnswer(t, w, Answer{Kind: tc.kind, Events: []event.RouterEvent{stored}, LastEventID: 7})
			})
			a, err := f.Fetch(context.Background(), base, local, tc.start, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Events) != 1 || a.Events[0].Rank() != local {
				t.Fatalf("events %+v, want one of rank %v", a.Events, local)
			}
		})
	}
}
