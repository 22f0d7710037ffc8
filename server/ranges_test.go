package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/kvindex/kvindex/engine"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
	"go.uber.org/goleak"
)

var rk1 = event.Rank{WorkerID: 1, DPRank: 0}

// rangeServer opens a server on a temp dir with the given dump cache options and serves it.
func rangeServer(t testing.TB, cfg Config, dc engine.DumpCacheOptions) (*Server, string) {
	t.Helper()
	cfg.DataDir = t.TempDir()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Durability = wal.NoSync
	cfg.Lanes = 2
	cfg.DumpCache = dc
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		s.e.CloseDumpCache()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, ts.URL
}

// chain returns Stored event id of rk1: one block with hash id*100 under block (id-1)*100 (no
// parent for id 1).
func chain(id uint64) event.RouterEvent {
	var parent *uint64
	if id > 1 {
		p := (id - 1) * 100
		parent = &p
	}
	return event.Stored(rk1, id, parent, event.Block{BlockHash: id * 100, TokensHash: id})
}

func post(t testing.TB, url string, evs ...event.RouterEvent) {
	t.Helper()
	body := []byte{'['}
	for i := range evs {
		if i > 0 {
			body = append(body, ',')
		}
		body = event.AppendJSON(body, &evs[i])
	}
	body = append(body, ']')
	resp, err := http.Post(url+"/v1/events", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST events: %d %s", resp.StatusCode, b)
	}
}

func getRaw(t testing.TB, url, query string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url + "/v1/ranks/1/0/events" + query)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	return resp.StatusCode, b
}

func getAnswer(t testing.TB, url, query string) recovery.Answer {
	t.Helper()
	code, b := getRaw(t, url, query)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", query, code, b)
	}
	a, err := recovery.DecodeAnswer(b)
	if err != nil {
		t.Fatalf("GET %s: %v in %s", query, err, b)
	}
	return a
}

// describe renders an answer compactly: kind, ids of its events (Events) or blocks (TreeDump,
// whose ids are synthetic), and its numbers.
func describe(a recovery.Answer) string {
	switch a.Kind {
	case recovery.AnswerEvents:
		var ids []string
		for _, ev := range a.Events {
			ids = append(ids, fmt.Sprint(ev.EventID))
		}
		return fmt.Sprintf("Events[%s] last=%d", strings.Join(ids, " "), a.LastEventID)
	case recovery.AnswerTreeDump:
		return fmt.Sprintf("TreeDump blocks=%d last=%d", len(dumpBlocks(a.Events)), a.LastEventID)
	case recovery.AnswerTooNew:
		return fmt.Sprintf("TooNew start=%d end=%d newest=%d", a.RequestedStart, a.RequestedEnd, a.NewestAvailable)
	case recovery.AnswerInvalidRange:
		return fmt.Sprintf("InvalidRange start=%d end=%d", a.StartID, a.EndID)
	}
	return a.Kind.String()
}

// dumpBlocks replays a dump into an empty index the way a router installs it (ReplaceRank) and
// returns the rank's dump from there: equal results mean equal scoring state.
func dumpBlocks(evs []event.RouterEvent) []string {
	ts := tier.New(nil)
	ts.ReplaceRank(rk1, evs)
	var out []string
	_ = ts.DumpRank(rk1, func(ev *event.RouterEvent) error {
		for _, b := range ev.Blocks {
			out = append(out, fmt.Sprintf("%s %d/%d<%v:%d", ev.Tier, b.BlockHash, b.TokensHash, ev.HasParent, ev.ParentHash))
		}
		return nil
	})
	return out
}

// serverBlocks is dumpBlocks of the server's own state (every tier) for rk1, read on the rank's
// lane.
func serverBlocks(t testing.TB, s *Server) []string {
	t.Helper()
	var evs []event.RouterEvent
	if err := s.e.Do(context.Background(), rk1, func() {
		_ = s.parts.TiersOf(rk1.Partition).DumpRank(rk1, func(ev *event.RouterEvent) error {
			evs = append(evs, ev.Clone())
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return dumpBlocks(evs)
}

func TestRangeRules(t *testing.T) {
	_, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	evs := make([]event.RouterEvent, 0, 10)
	for id := uint64(1); id <= 10; id++ {
		evs = append(evs, chain(id))
	}
	post(t, url, evs...)
	// A folded prefix: retention keeps the newest 4 once more than 8 are logged.
	_, folded := rangeServer(t, Config{RetainEvents: 4}, engine.DumpCacheOptions{})
	post(t, folded, evs...)

	for _, tc := range []struct {
		url, query, want string
	}{
		{url, "?start=5&end=3", "InvalidRange start=5 end=3"},
		{url, "", "TreeDump blocks=10 last=10"},
		{url, "?end=3", "TreeDump blocks=10 last=10"},
		{url, "?start=11", "TooNew start=11 end=10 newest=10"}, // no end requested: the newest id
		{url, "?start=11&end=20", "TooNew start=11 end=20 newest=10"},
		{url, "?start=3", "Events[3 4 5 6 7 8 9 10] last=10"},
		{url, "?start=3&end=4", "Events[3 4 5 6 7 8 9 10] last=10"},
		{url, "?start=10", "Events[10] last=10"},
		{url, "?start=0", "TreeDump blocks=10 last=10"}, // below the oldest (1)
		{url, "?start=3&limit=2", "Events[3 4] last=4"},
		{url, "?start=5&limit=2", "Events[5 6] last=6"},
		{url, "?start=9&limit=5", "Events[9 10] last=10"},
		{folded, "?start=1", "TreeDump blocks=10 last=10"},
		{folded, "?start=6", "TreeDump blocks=10 last=10"},
		{folded, "?start=7", "Events[7 8 9 10] last=10"},
		{folded, "?start=11", "TooNew start=11 end=10 newest=10"},
	} {
		if got := describe(getAnswer(t, tc.url, tc.query)); got != tc.want {
			t.Errorf("%s %s: got %q, want %q", map[bool]string{true: "folded", false: "full"}[tc.url == folded], tc.query, got, tc.want)
		}
	}

	// An unknown rank answers an empty TreeDump with last_event_id 0, start or not.
	for _, q := range []string{"", "?start=5"} {
		resp, err := http.Get(url + "/v1/ranks/9/9/events" + q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got, want := strings.TrimSpace(string(b)), `{"TreeDump":{"events":[],"last_event_id":0}}`; got != want {
			t.Errorf("unknown rank %q: got %s, want %s", q, got, want)
		}
	}
	for _, q := range []string{"?start=x", "?limit=-1", "?end=1.5", "?start=3&limit=0", "?start=3&limt=2", "?start=1&start=2"} {
		if code, b := getRaw(t, url, q); code != http.StatusBadRequest {
			t.Errorf("%s: got %d %s, want 400", q, code, b)
		}
	}
}

func TestRangeClearedCut(t *testing.T) {
	_, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	hostCleared := event.Cleared(rk1, 6)
	hostCleared.Tier = event.TierHostPinned
	post(t, url, chain(1), chain(2), chain(3), event.Cleared(rk1, 4),
		event.Stored(rk1, 5, nil, event.Block{BlockHash: 100, TokensHash: 1}), hostCleared,
		event.Stored(rk1, 7, nil, event.Block{BlockHash: 700, TokensHash: 7}))
	for _, tc := range []struct{ query, want string }{
		{"?start=1", "Events[6 7] last=7"},
		{"?start=5", "Events[6 7] last=7"}, // a host-tier Cleared clears every tier: it cuts too
		{"?start=1&limit=2", "Events[1 2] last=2"},
		{"?start=3&limit=2", "Events[6 7] last=7"}, // a Cleared after a full page still cuts
		{"?start=4&limit=10", "Events[6 7] last=7"},
	} {
		if got := describe(getAnswer(t, url, tc.query)); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.query, got, tc.want)
		}
	}
}

func TestTreeDumpSingleFlight(t *testing.T) {
	s, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	evs := make([]event.RouterEvent, 0, 50)
	for id := uint64(1); id <= 50; id++ {
		evs = append(evs, chain(id))
	}
	post(t, url, evs...)
	const n = 32
	// The build waits (on the lane) until the other n-1 requests joined its flight.
	s.e.SetDumpTestBuild(func(event.Rank) error {
		deadline := time.Now().Add(5 * time.Second)
		for s.e.DumpCacheCounters().Shared < n-1 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		return nil
	})
	bodies := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			code, b := getRaw(t, url, "")
			if code != http.StatusOK {
				t.Errorf("request %d: %d %s", i, code, b)
			}
			bodies[i] = b
		})
	}
	wg.Wait()
	if got := s.e.DumpCacheCounters().Builds; got != 1 {
		t.Errorf("builds = %d, want 1", got)
	}
	if got := s.e.DumpCacheCounters().Shared; got != n-1 {
		t.Errorf("shared = %d, want %d", got, n-1)
	}
	for i := range bodies {
		if !bytes.Equal(bodies[i], bodies[0]) {
			t.Fatalf("body %d differs:\n%s\n%s", i, bodies[i], bodies[0])
		}
	}
	a, err := recovery.DecodeAnswer(bodies[0])
	if err != nil {
		t.Fatal(err)
	}
	if a.Kind != recovery.AnswerTreeDump || a.LastEventID != 50 || len(dumpBlocks(a.Events)) != 50 {
		t.Errorf("got %s, want a TreeDump of 50 blocks at 50", describe(a))
	}
}

func TestTreeDumpCacheLifecycle(t *testing.T) {
	s, url := rangeServer(t, Config{}, engine.DumpCacheOptions{AppendBudget: 3})
	d := s.e
	type counts struct{ builds, hits, ext uint64 }
	now := func() counts {
		return counts{d.DumpCacheCounters().Builds, d.DumpCacheCounters().Hits, d.DumpCacheCounters().Extensions}
	}
	tree := func(step string, want counts) {
		t.Helper()
		a := getAnswer(t, url, "")
		if a.Kind != recovery.AnswerTreeDump {
			t.Fatalf("%s: got %s", step, describe(a))
		}
		st, _ := s.e.RankStatus(rk1)
		if a.LastEventID != st.Last {
			t.Errorf("%s: last_event_id %d, rank at %d", step, a.LastEventID, st.Last)
		}
		for i := range a.Events {
			if a.Events[i].EventID != uint64(i) {
				t.Errorf("%s: dump event %d has id %d: synthetic ids must be contiguous from 0", step, i, a.Events[i].EventID)
				break
			}
		}
		if got, want := dumpBlocks(a.Events), serverBlocks(t, s); !slices.Equal(got, want) {
			t.Errorf("%s: the dump replays to\n%v\nthe server holds\n%v", step, got, want)
		}
		if got := now(); got != want {
			t.Errorf("%s: builds/hits/extensions = %+v, want %+v", step, got, want)
		}
	}
	post(t, url, chain(1), chain(2), chain(3))
	tree("first request builds", counts{1, 0, 0})
	tree("unchanged: a hit", counts{1, 1, 0})
	post(t, url, chain(4))
	tree("one Stored: extended", counts{1, 2, 1})
	diskStored := event.Stored(rk1, 6, nil, event.Block{BlockHash: 600, TokensHash: 66})
	diskStored.Tier = event.TierDisk
	post(t, url, event.Stored(rk1, 5, nil, event.Block{BlockHash: 5000, TokensHash: 55}), diskStored)
	tree("Stored + another tier's Stored: extended (the tail tagged with its tier)", counts{1, 3, 2})
	post(t, url, chain(7))
	tree("the append budget is spent: rebuilt", counts{2, 3, 2})
	diskRemoved := event.Removed(rk1, 8, 600)
	diskRemoved.Tier = event.TierDisk
	post(t, url, diskRemoved)
	tree("another tier's Removed: rebuilt", counts{3, 3, 2})
	post(t, url, event.Cleared(rk1, 9), chain(1))
	tree("a Cleared: rebuilt", counts{4, 3, 2})
	tree("unchanged again: a hit", counts{4, 4, 2})
	post(t, url, event.Stored(rk1, 20, nil, event.Block{BlockHash: 2000, TokensHash: 20}))
	tree("a gap (reset): rebuilt", counts{5, 4, 2})
	// A publisher restart climbs back to the cached id with a different history: same cursor,
	// same gap counters, a different record at id 20.
	for id := uint64(1); id <= 20; id++ {
		post(t, url, event.Stored(rk1, id, nil, event.Block{BlockHash: id, TokensHash: id}))
	}
	tree("new epoch back at id 20: rebuilt", counts{6, 4, 2})
}

func TestTreeDumpFailedBuildNotCached(t *testing.T) {
	s, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	d := s.e
	post(t, url, chain(1), chain(2))
	getAnswer(t, url, "")
	post(t, url, chain(3))
	boom := errors.New("boom")
	d.SetDumpTestBuild(func(event.Rank) error { return boom })
	if _, _, err := s.e.RangeAnswer(context.Background(), rk1, recovery.RangeRequest{}); err != nil {
		t.Fatalf("an extension needs no build, got %v", err)
	}
	post(t, url, event.Removed(rk1, 4, 300))
	if code, b := getRaw(t, url, ""); code != http.StatusInternalServerError || !strings.Contains(string(b), "boom") {
		t.Fatalf("failing build: got %d %s, want 500 with the cause", code, b)
	}
	d.SetDumpTestBuild(nil)
	post(t, url, chain(5)) // 5 under 400, which is gone: not applied, logged
	builds, ext := d.DumpCacheCounters().Builds, d.DumpCacheCounters().Extensions
	a := getAnswer(t, url, "")
	if d.DumpCacheCounters().Builds != builds+1 || d.DumpCacheCounters().Extensions != ext {
		t.Errorf("after a failed build: builds %d→%d, extensions %d→%d; want a fresh build, not an extension of a dropped entry",
			builds, d.DumpCacheCounters().Builds, ext, d.DumpCacheCounters().Extensions)
	}
	if got, want := dumpBlocks(a.Events), serverBlocks(t, s); !slices.Equal(got, want) {
		t.Errorf("dump replays to %v, server holds %v", got, want)
	}
}

func TestDumpCacheMetricsAndClose(t *testing.T) {
	// Registered first, so it runs after the server's own cleanup.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	s, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	post(t, url, chain(1))
	getAnswer(t, url, "")
	getAnswer(t, url, "")
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"kvindex_dump_cache_hits_total 1", "kvindex_dump_cache_misses_total 1", "kvindex_dump_builds_total 1"} {
		if !strings.Contains(string(b), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	s.e.CloseDumpCache()
	if code, _ := getRaw(t, url, ""); code != http.StatusServiceUnavailable {
		t.Errorf("after close: got %d, want 503", code)
	}
}

// A publisher restart that climbs back to the cached id leaves the cursor, the gap counters and
// the degraded flag as they were: only the record at that id tells the histories apart.
func TestTreeDumpCacheEpochSameID(t *testing.T) {
	s, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	post(t, url, chain(1), chain(2), chain(3))
	getAnswer(t, url, "")
	post(t, url, event.Stored(rk1, 1, nil, event.Block{BlockHash: 11, TokensHash: 11}),
		event.Stored(rk1, 2, nil, event.Block{BlockHash: 12, TokensHash: 12}),
		event.Stored(rk1, 3, nil, event.Block{BlockHash: 13, TokensHash: 13}))
	a := getAnswer(t, url, "")
	if got := s.e.DumpCacheCounters().Builds; got != 2 {
		t.Errorf("builds = %d, want 2 (the cached dump of the old epoch must not be served)", got)
	}
	if got, want := dumpBlocks(a.Events), serverBlocks(t, s); !slices.Equal(got, want) {
		t.Errorf("dump replays to %v, server holds %v", got, want)
	}
}

// benchRank fills rk1 with 10,000 blocks: 200 root sequences of 50 blocks, one event each.
func benchRank(b *testing.B, dc engine.DumpCacheOptions) (*Server, http.Handler) {
	s, url := rangeServer(b, Config{}, dc)
	evs := make([]event.RouterEvent, 0, 200)
	for i := range uint64(200) {
		blocks := make([]event.Block, 50)
		for j := range uint64(50) {
			blocks[j] = event.Block{BlockHash: i<<32 | j + 1, TokensHash: i*1000 + j}
		}
		evs = append(evs, event.Stored(rk1, i+1, nil, blocks...))
	}
	post(b, url, evs...)
	return s, s.Handler()
}

func serve(b *testing.B, h http.Handler, target string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	if rec.Code != http.StatusOK {
		b.Fatalf("%s: %d %s", target, rec.Code, rec.Body.Bytes())
	}
}

// BenchmarkTreeDump: concurrent TreeDump requests for one rank of 10k blocks (unchanged).
//
//	singleFlight: concurrent requests share builds, nothing cached (MaxCost < 0)
//	cached: single flight + ristretto
func BenchmarkTreeDump(b *testing.B) {
	for _, bc := range []struct {
		name string
		dc   engine.DumpCacheOptions
	}{{"singleFlight", engine.DumpCacheOptions{MaxCost: -1}}, {"cached", engine.DumpCacheOptions{}}} {
		b.Run(bc.name, func(b *testing.B) {
			_, h := benchRank(b, bc.dc)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					serve(b, h, "/v1/ranks/1/0/events")
				}
			})
		})
	}
}

// BenchmarkRangeEvents: an Events answer of the newest 100 of 200 logged events (5,000 blocks),
// read from the log and encoded: the cost a cache of log ranges would save on a hit.
func BenchmarkRangeEvents(b *testing.B) {
	_, h := benchRank(b, engine.DumpCacheOptions{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			serve(b, h, "/v1/ranks/1/0/events?start=101")
		}
	})
}
