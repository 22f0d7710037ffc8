package server

import (
	"context"
	"github.com/kvindex/kvindex/engine"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/recovery"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRule7RangeAnswersAreExactUnderRetention (docs/CONTRACT.md §5 lifecycle rule 7; bug 6 of issue 11):
// retention folds the requested start away between the rules reading oldest and the events being
// read; the answer is then a TreeDump, never Events that start after start (which the consumer
// would record as a false loss).
func TestRule7RangeAnswersAreExactUnderRetention(t *testing.T) {
	s, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	post(t, url, chain(1), chain(2), chain(3), chain(4), chain(5))
	s.e.SetTestAfterOldest(func(rk event.Rank) {
		if err := s.e.Do(context.Background(), rk, func() {
			if err := s.e.FoldLog(context.Background(), rk, 3); err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Error(err)
		}
	})
	a := getAnswer(t, url, "?start=2")
	if a.Kind != recovery.AnswerTreeDump || a.LastEventID != 5 {
		t.Fatalf("start folded away meanwhile: got %s, want a TreeDump as of 5", describe(a))
	}
	if got, want := dumpBlocks(a.Events), serverBlocks(t, s); !slices.Equal(got, want) {
		t.Fatalf("dump replays to %v, server holds %v", got, want)
	}
	s.e.SetTestAfterOldest(nil)
	if a := getAnswer(t, url, "?start=4"); a.Kind != recovery.AnswerEvents || a.Events[0].EventID != 4 {
		t.Fatalf("a retained start: got %s, want Events from 4", describe(a))
	}
}

// TestRule8CachedTreeDumpOnlyForTheSameIncarnation (docs/CONTRACT.md §5 lifecycle rule 8; bug 8 of issue
// 11): a rank removed and re-added whose newest log record is byte-identical to the cached
// dump's must not be served the old incarnation's dump.
func TestRule8CachedTreeDumpOnlyForTheSameIncarnation(t *testing.T) {
	s, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	post(t, url, chain(1), chain(2), chain(3))
	getAnswer(t, url, "")
	if _, err := s.e.RemoveRank(context.Background(), rk1); err != nil {
		t.Fatal(err)
	}
	post(t, url, event.Stored(rk1, 1, nil, event.Block{BlockHash: 11, TokensHash: 11}),
		event.Stored(rk1, 2, nil, event.Block{BlockHash: 12, TokensHash: 12}), chain(3))
	a := getAnswer(t, url, "")
	if got, want := dumpBlocks(a.Events), serverBlocks(t, s); !slices.Equal(got, want) {
		t.Fatalf("dump after remove and re-add replays to %v, server holds %v", got, want)
	}
	if got := s.e.DumpCacheCounters().Builds; got != 2 {
		t.Fatalf("builds = %d, want 2", got)
	}
}

// TestRule10EveryRecoveryOutcomeIsCounted (docs/CONTRACT.md §5 lifecycle rule 10; bug 7 of issue 11): fetches
// by kind and outcome, gaps recovered and lost, and ranks by state are exported.
func TestRule10EveryRecoveryOutcomeIsCounted(t *testing.T) {
	up, upURL := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	post(t, upURL, chain(1), chain(2), chain(3), chain(4))
	_ = up
	s, url := rangeServer(t, Config{Upstream: upURL, FetchBackoff: time.Millisecond}, engine.DumpCacheOptions{})
	post(t, url, chain(1))             // first sight with a source: full restore
	waitState(t, s, rk1, "live")       // restored from the upstream's dump
	post(t, upURL, chain(5), chain(6)) // the router misses 5
	post(t, url, chain(6))             // gap: range fetch from 5
	waitState(t, s, rk1, "live")
	dead := event.Rank{WorkerID: 2} // a worker whose source cannot answer
	putSource(t, url, dead.WorkerID, "http://127.0.0.1:1")
	post(t, url, event.Stored(dead, 3, nil, event.Block{BlockHash: 9, TokensHash: 9}))
	waitState(t, s, dead, "degraded")

	m := s.m
	// The outcome callbacks run on the lanes once an answer is taken, which may be just after
	// the state a waitState saw: wait for the counts (never more than one each).
	counts := func() []float64 {
		return []float64{testutil.ToFloat64(m.fetches.WithLabelValues("full", "treedump")),
			testutil.ToFloat64(m.fetches.WithLabelValues("range", "events")),
			testutil.ToFloat64(m.fetches.WithLabelValues("full", "failed")),
			testutil.ToFloat64(m.gaps.WithLabelValues("recovered")),
			testutil.ToFloat64(m.gaps.WithLabelValues("lost"))}
	}
	want := []float64{1, 1, 1, 1, 1}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(counts(), want) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := counts(); !slices.Equal(got, want) {
		t.Errorf("fetches{full,treedump}, {range,events}, {full,failed}, gaps{recovered}, gaps{lost} = %v, want %v", got, want)
	}
	body := scrape(t, url)
	for _, want := range []string{`kvindex_ranks{model="default",routing_group="default",state="live"} 1`,
		`kvindex_ranks{model="default",routing_group="default",state="degraded"} 1`,
		`kvindex_ranks{model="default",routing_group="default",state="recovering"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func waitState(t *testing.T, s *Server, r event.Rank, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, ok := s.e.RankStatus(r); ok && st.State.String() == want && st.Pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			st, ok := s.e.RankStatus(r)
			t.Fatalf("rank %v: %+v (listed %v), want %s", r, st, ok, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func putSource(t *testing.T, url string, worker uint64, src string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url+"/v1/workers/"+strconv.FormatUint(worker, 10)+"/source", strings.NewReader(`{"url":"`+src+`"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT source: %d", resp.StatusCode)
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
