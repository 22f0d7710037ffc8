package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/testutil"
)

// walWriteFailures are the WAL operations a full or failing disk breaks (testutil.FailingWAL).
var walWriteFailures = []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo, errorfs.OpFileWrite}

// failingServer serves a data dir on a crashable in-memory FS whose WAL writes and syncs fail
// once *on is set. The server is closed at the end of the test.
func failingServer(t *testing.T) (s *Server, url string, mem *vfs.MemFS, on *atomic.Bool) {
	t.Helper()
	mem = vfs.NewCrashableMem()
	fs, on := testutil.FailingWAL(mem, walWriteFailures...)
	s, url, stop := serveConfig(t, Config{DataDir: "data", FS: fs, Lanes: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { _ = stop() }) // closing after a fatal error reports it: expected here
	return s, url, mem, on
}

// wantStoreFailed checks an answer of a server whose store failed: 503, an error that says the
// store failed and names the cause (errorfs's injected error).
func wantStoreFailed(t *testing.T, what string, code int, body string) {
	t.Helper()
	var e struct{ Error string }
	if err := json.Unmarshal([]byte(body), &e); code != 503 || err != nil ||
		!strings.HasPrefix(e.Error, "store failed") || !strings.Contains(e.Error, "restarted") || !strings.Contains(e.Error, errorfs.ErrInjected.Error()) {
		t.Fatalf("%s after the store failed: %d %s; want 503 {\"error\": \"store failed … restarted …: <cause>\"}", what, code, body)
	}
}

// TestFailedStoreIsVisible (issue 16 item 5): after a fatal store error (a failed WAL write or
// sync) /healthz and /readyz answer 503 naming the cause, every write answers 503 with the same
// error, kvindex_store_failed is 1 and the status page says so; reads are still served, and
// every event acknowledged before the failure is durable (found again after a crash and reopen).
func TestFailedStoreIsVisible(t *testing.T) {
	_, url, mem, on := failingServer(t)
	// Ranks on both lanes, and a direct log commit (a worker's recovery source).
	ranks := []event.Rank{{WorkerID: 1}, {WorkerID: 2}, {WorkerID: 3, DPRank: 1}}
	acked := map[event.Rank][]event.RouterEvent{}
	for _, rk := range ranks {
		for id := uint64(1); id <= 3; id++ {
			var parent *uint64
			if id > 1 {
				p := rk.WorkerID*1000 + id - 1
				parent = &p
			}
			ev := event.Stored(rk, id, parent, event.Block{BlockHash: rk.WorkerID*1000 + id, TokensHash: id})
			if code, body := call(t, "POST", url+"/v1/events", eventsJSON(ev)); code != 200 {
				t.Fatalf("write before the failure: %d %s", code, body)
			}
			acked[rk] = append(acked[rk], ev)
		}
	}
	if code, body := call(t, "PUT", url+"/v1/workers/9/source", `{"url":"http://127.0.0.1:1"}`); code != 200 {
		t.Fatalf("source before the failure: %d %s", code, body)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := call(t, "GET", url+p, ""); code != 200 {
			t.Fatalf("%s before the failure: %d %s", p, code, body)
		}
	}

	on.Store(true)
	failed := event.Stored(ranks[0], 4, nil, event.Block{BlockHash: 1004, TokensHash: 4})
	code, body := call(t, "POST", url+"/v1/events", eventsJSON(failed))
	wantStoreFailed(t, "the write that hit the failure", code, body)

	for _, p := range []string{"/healthz", "/readyz"} {
		code, body := call(t, "GET", url+p, "")
		wantStoreFailed(t, p, code, body)
	}
	for _, w := range []struct{ method, path, body string }{
		{"POST", "/v1/events", eventsJSON(event.Stored(ranks[1], 4, nil, event.Block{BlockHash: 2004, TokensHash: 4}))},
		{"POST", "/v1/events", eventsJSON(event.Stored(event.Rank{WorkerID: 77}, 1, nil, event.Block{BlockHash: 7, TokensHash: 7}))},
		{"DELETE", "/v1/workers/2", ""},
		{"DELETE", "/v1/workers/3/ranks/1", ""},
		{"PUT", "/v1/workers/9/source", `{"url":"http://127.0.0.1:2"}`},
		{"DELETE", "/v1/workers/9/source", ""},
		{"POST", "/v1/sources", `{"kind":"zmq","endpoint":"tcp://127.0.0.1:1"}`},
		{"POST", "/v1/flush", ""},
		{"POST", "/v1/routing_decisions", `{"worker_id":1,"block_hashes":[1,2]}`},
	} {
		code, body := call(t, w.method, url+w.path, w.body)
		wantStoreFailed(t, w.method+" "+w.path, code, body)
	}

	// Reads are served, and answer what was acknowledged.
	_, scrape := call(t, "GET", url+"/metrics", "")
	if v, ok := metricValue(t, scrape, "kvindex_store_failed"); !ok || v != 1 {
		t.Fatalf("kvindex_store_failed %v (present %v), want 1", v, ok)
	}
	if code, page := call(t, "GET", url+"/", ""); code != 200 || !strings.Contains(page, `id="store-failed"`) || !strings.Contains(page, errorfs.ErrInjected.Error()) {
		t.Fatalf("status page: %d, no store-failed banner naming the cause", code)
	}
	if code, body := call(t, "POST", url+"/v1/find_matches", `{"block_hashes":[1,2,3]}`); code != 200 ||
		!strings.Contains(body, `{"worker_id":1,"dp_rank":0,"score":3,"tree_size":3}`) {
		t.Fatalf("find_matches: %d %s", code, body)
	}
	if code, body := call(t, "POST", url+"/v1/find_matches_for_request", `{"tokens":[1,2,3]}`); code != 200 {
		t.Fatalf("find_matches_for_request: %d %s", code, body)
	}
	code, body = call(t, "GET", url+"/v1/ranks", "")
	var rows []rankJSON
	if err := json.Unmarshal([]byte(body), &rows); code != 200 || err != nil || len(rows) != len(ranks) {
		t.Fatalf("ranks: %d %s", code, body)
	}
	for _, r := range rows {
		if r.LastEventID != 3 || r.Blocks != 3 {
			t.Fatalf("ranks: %+v, want every rank at its acknowledged id 3 with 3 blocks", rows)
		}
	}
	if code, body := call(t, "GET", url+"/v1/dump", ""); code != 200 || strings.Count(body, "\n") != len(ranks)+1 { // the partition line, then one line per rank
		t.Fatalf("dump: %d %s", code, body)
	}
	code, body = call(t, "GET", url+"/v1/ranks/1/0/events?start=2", "")
	if a, err := recovery.DecodeAnswer([]byte(body)); code != 200 || err != nil || a.Kind != recovery.AnswerEvents || a.LastEventID != 3 {
		t.Fatalf("range route: %d %s", code, body)
	}
	// The failed event never reached the tree, and the log's copy of it is not served.
	code, body = call(t, "GET", url+"/v1/ranks/1/0/events?start=4", "")
	if a, err := recovery.DecodeAnswer([]byte(body)); code != 200 || err != nil || a.Kind != recovery.AnswerTooNew || a.NewestAvailable != 3 {
		t.Fatalf("range route from the failed event: %d %s, want TooNew with newest 3", code, body)
	}
	if code, body := call(t, "GET", url+"/v1/sources", ""); code != 200 {
		t.Fatalf("sources: %d %s", code, body)
	}

	// Durable: a crash now, then a reopen, finds every acknowledged event (and the source).
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	s2, url2, stop2 := serveConfig(t, Config{DataDir: "data", FS: crashed, Lanes: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer func() {
		if err := stop2(); err != nil {
			t.Errorf("closing the reopened server: %v", err)
		}
	}()
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := call(t, "GET", url2+p, ""); code != 200 {
			t.Fatalf("%s after the reopen: %d %s", p, code, body)
		}
	}
	for rk, evs := range acked {
		m := testutil.NewModel()
		for i := range evs {
			m.Apply(&evs[i])
		}
		want := m.HeldBlocks(rk)
		slices.Sort(want)
		got := blocksOf(t, url2, rk)
		if !slices.Equal(got, want) {
			t.Fatalf("rank %v after the reopen holds %v, the acknowledged events %v", rk, got, want)
		}
		if st, ok := s2.e.RankStatus(rk); !ok || st.Last != evs[len(evs)-1].EventID {
			t.Fatalf("rank %v after the reopen: %+v, last acknowledged %d", rk, st, evs[len(evs)-1].EventID)
		}
	}
	if got := s2.e.RecoverySource(9); got != "http://127.0.0.1:1" {
		t.Fatalf("worker 9's source after the reopen: %q", got)
	}
	if code, body := call(t, "POST", url2+"/v1/events", eventsJSON(event.Stored(ranks[0], 4, nil, event.Block{BlockHash: 1004, TokensHash: 4}))); code != 200 {
		t.Fatalf("write after the reopen: %d %s", code, body)
	}
}

// blocksOf is the block hashes a rank holds, sorted, from /v1/dump.
func blocksOf(t *testing.T, url string, rk event.Rank) []uint64 {
	t.Helper()
	code, body := call(t, "GET", fmt.Sprintf("%s/v1/dump?worker_id=%d&dp_rank=%d", url, rk.WorkerID, rk.DPRank), "")
	if code != 200 {
		t.Fatalf("dump: %d %s", code, body)
	}
	evs, err := event.DecodeNDJSON(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, ev := range evs {
		for _, b := range ev.Blocks {
			out = append(out, b.BlockHash)
		}
	}
	slices.Sort(out)
	return out
}

// TestFailedStoreFromDirectCommitIsVisible: a fatal error hit by a commit outside the lanes (PUT
// /v1/workers/{id}/source writes the log directly) fails the store just the same, though no lane
// has failed yet: 503 on the write, /healthz, /readyz and events; kvindex_store_failed 1.
func TestFailedStoreFromDirectCommitIsVisible(t *testing.T) {
	s, url, _, on := failingServer(t)
	on.Store(true)
	code, body := call(t, "PUT", url+"/v1/workers/9/source", `{"url":"http://127.0.0.1:1"}`)
	wantStoreFailed(t, "PUT source", code, body)
	if err := s.e.LaneFailure(); err != nil {
		t.Fatalf("a lane failed without a lane commit: %v", err)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		code, body := call(t, "GET", url+p, "")
		wantStoreFailed(t, p, code, body)
	}
	code, body = call(t, "POST", url+"/v1/events", eventsJSON(event.Stored(event.Rank{WorkerID: 1}, 1, nil, event.Block{BlockHash: 1, TokensHash: 1})))
	wantStoreFailed(t, "POST /v1/events", code, body)
	_, scrape := call(t, "GET", url+"/metrics", "")
	if v, ok := metricValue(t, scrape, "kvindex_store_failed"); !ok || v != 1 {
		t.Fatalf("kvindex_store_failed %v (present %v), want 1", v, ok)
	}
}

// TestFailedStoreKeepsReadinessOrder: before the replay ends /readyz answers the replay status;
// a healthy ready server answers 200 on both probes (the failed-store 503 is only for a failure).
func TestFailedStoreKeepsReadinessOrder(t *testing.T) {
	s, err := Open(Config{DataDir: "data", FS: vfs.NewMem(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	if code, body := call(t, "GET", hs.URL+"/readyz", ""); code != 503 || strings.Contains(body, "store failed") {
		t.Fatalf("/readyz before the replay: %d %s", code, body)
	}
	if code, _ := call(t, "GET", hs.URL+"/healthz", ""); code != 200 {
		t.Fatalf("/healthz before the replay: %d", code)
	}
	if err := s.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := call(t, "GET", hs.URL+p, ""); code != 200 {
			t.Fatalf("%s when healthy: %d %s", p, code, body)
		}
	}
}
