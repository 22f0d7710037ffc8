package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/wal"
)

func quietConfig(dir string, peers ...string) Config {
	return Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Durability: wal.NoSync, Lanes: 2, Peers: peers}
}

// scrapeValue is the value of a metric's sample in url's /metrics (-1 when absent).
func scrapeValue(t *testing.T, url, series string) float64 {
	t.Helper()
	_, body := call(t, "GET", url+"/metrics", "")
	if v, ok := metricValue(t, body, series); ok {
		return v
	}
	return -1
}

// TestPeersBootstrapAnswersLikeThePeer checks the rule "serve --peers: each partition empty at
// start is filled from the first peer whose /dump answers (a peer that does not answer is
// skipped), through the normal pipeline, so B answers /query like A once ready; the events are
// durable, so a restart does not ask again; progress is a metric".
func TestPeersBootstrapAnswersLikeThePeer(t *testing.T) {
	_, a, stopA := serveConfig(t, quietConfig(t.TempDir()))
	defer func() { _ = stopA() }()
	pub := startZMQPub(t)
	steps := []struct{ path, body string }{
		{"/register", `{"instance_id":7,"endpoint":"` + pub.ep + `","model_name":"llama","block_size":4}`},
		{"/register", `{"instance_id":9,"endpoint":"tcp://127.0.0.1:9","model_name":"qwen","block_size":8}`},
		{"/v1/events?model_name=llama", `[{"worker_id":7,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":701,"tokens_hash":14643705804678351452},{"block_hash":702,"tokens_hash":16777012769546811212}]}}}},
		 {"worker_id":7,"event":{"event_id":1,"dp_rank":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":711,"tokens_hash":14643705804678351452}]}}}},
		 {"worker_id":8,"event":{"event_id":3,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":801,"tokens_hash":14643705804678351452}]}}}}]`},
		{"/v1/events", `[{"worker_id":10,"event":{"event_id":5,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1001,"tokens_hash":11}]}}}}]`},
	}
	for _, st := range steps {
		if code, body := call(t, "POST", a+st.path, st.body); code/100 != 2 {
			t.Fatalf("A %s: %d %s", st.path, code, body)
		}
	}
	queries := []struct{ path, body string }{
		{"/query", `{"token_ids":[1,2,3,4,5,6,7,8],"model_name":"llama"}`},
		{"/query_by_hash", `{"block_hashes":[11],"model_name":"default"}`},
	}
	_, wantA := call(t, "POST", a+queries[0].path, queries[0].body)
	if !strings.Contains(wantA, `"7":{"0":8,"1":4}`) {
		t.Fatalf("A's own answer %s", wantA)
	}

	dir := t.TempDir()
	dead := "http://127.0.0.1:1" // nothing listens: skipped
	_, b, stopB := serveConfig(t, quietConfig(dir, dead, a))
	if code, body := call(t, "GET", b+"/readyz", ""); code != 200 {
		t.Fatalf("B /readyz after Recover: %d %s", code, body)
	}
	for _, q := range queries {
		_, want := call(t, "POST", a+q.path, q.body)
		if code, got := call(t, "POST", b+q.path, q.body); code != 200 || got != want {
			t.Errorf("B %s %s: %d %s, want A's %s", q.path, q.body, code, got, want)
		}
	}
	if got := scrapeValue(t, b, "kvindex_peer_bootstrap_events_total"); got != 4 {
		t.Errorf("kvindex_peer_bootstrap_events_total %v, want 4", got)
	}
	if got := scrapeValue(t, b, "kvindex_peer_bootstrap_partitions"); got != 3 {
		t.Errorf("kvindex_peer_bootstrap_partitions %v, want 3 (default, llama, and qwen's empty dump)", got)
	}
	if err := stopB(); err != nil {
		t.Fatal(err)
	}

	// Restarted, B's partitions are not empty: it replays its own log and asks nobody.
	_, b, stopB = serveConfig(t, quietConfig(dir, a))
	defer func() { _ = stopB() }()
	if got := scrapeValue(t, b, "kvindex_peer_bootstrap_events_total"); got != 0 {
		t.Errorf("after restart: kvindex_peer_bootstrap_events_total %v, want 0", got)
	}
	if _, got := call(t, "POST", b+queries[0].path, queries[0].body); got != wantA {
		t.Errorf("after restart: B %s, want %s", got, wantA)
	}
}

// TestPeersBootstrapFromDynamoBeforeReady checks the rules "a Dynamo indexer's dump (ids not
// rising per rank) is applied with ids renumbered per rank; /readyz stays 503 until the bootstrap
// is done; a peer that fails leaves the partitions empty and the server ready".
func TestPeersBootstrapFromDynamoBeforeReady(t *testing.T) {
	release := make(chan struct{})
	dynamo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/dump" {
			http.NotFound(w, r)
			return
		}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"llama:default":{"block_size":4,"events":[
		 {"worker_id":7,"event":{"event_id":0,"dp_rank":0,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":701,"tokens_hash":14643705804678351452}]}}}},
		 {"worker_id":7,"event":{"event_id":0,"dp_rank":0,"data":{"stored":{"parent_hash":701,"blocks":[{"block_hash":702,"tokens_hash":16777012769546811212}]}}}}]},
		 "broken:default":{"error":"dump failed"}}`)
	}))
	defer dynamo.Close()
	s, tsURL := serveUnrecovered(t, quietConfig(t.TempDir(), dynamo.URL))
	done := make(chan error, 1)
	go func() { done <- s.Recover(context.Background()) }()
	waitStatus := func(want string) {
		t.Helper()
		waitBody(t, "GET", tsURL+"/metrics", "", want)
	}
	waitStatus("kvindex_ready 0")
	for _, p := range []string{"/readyz", "/health"} { // Dynamo's clients wait for /health (docs/CONTRACT.md §9)
		if code, body := call(t, "GET", tsURL+p, ""); code != http.StatusServiceUnavailable || !strings.Contains(body, "bootstrapping from peers") {
			t.Fatalf("%s while the peer's dump is pending: %d %s, want 503 bootstrapping", p, code, body)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, "GET", tsURL+"/health", ""); code != http.StatusOK {
		t.Fatalf("/health once ready: %d %s", code, body)
	}
	waitBody(t, "POST", tsURL+"/query", `{"token_ids":[1,2,3,4,5,6,7,8],"model_name":"llama"}`, `"scores":{"7":{"0":8}}`)

	// A peer that fails: ready, empty.
	_, c, stopC := serveConfig(t, quietConfig(t.TempDir(), "http://127.0.0.1:1"))
	defer func() { _ = stopC() }()
	if code, body := call(t, "GET", c+"/dump", ""); code != 200 || strings.TrimSpace(body) != "{}" {
		t.Errorf("C /dump: %d %s, want {}", code, body)
	}
}

// TestPeersBootstrapCountsWhatItSkips checks the rule "what the peer bootstrap skips is exported,
// not only logged: kvindex_peer_bootstrap_skipped_partitions_total counts the dump's partitions
// skipped, kvindex_peer_bootstrap_skipped_events_total the events of a worker of another
// partition here; both are exported at 0 before anything is skipped".
func TestPeersBootstrapCountsWhatItSkips(t *testing.T) {
	dir := t.TempDir()
	_, url, stop := serveConfig(t, quietConfig(dir))
	for _, series := range []string{"kvindex_peer_bootstrap_skipped_partitions_total", "kvindex_peer_bootstrap_skipped_events_total"} {
		if got := scrapeValue(t, url, series); got != 0 {
			t.Errorf("%s without a bootstrap: %v, want 0", series, got)
		}
	}
	// Worker 7 belongs to partition mine here.
	if code, body := call(t, "POST", url+"/v1/events?model_name=mine",
		`[{"worker_id":7,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":11}]}}}}]`); code != 200 {
		t.Fatalf("events of worker 7: %d %s", code, body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"other:default":{"block_size":16,"events":[
		 {"worker_id":7,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":701,"tokens_hash":21}]}}}},
		 {"worker_id":8,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":801,"tokens_hash":21}]}}}},
		 {"worker_id":7,"event":{"event_id":2,"data":{"stored":{"parent_hash":701,"blocks":[{"block_hash":702,"tokens_hash":22}]}}}}]},
		 "broken:default":{"error":"dump failed"}}`)
	}))
	defer peer.Close()
	_, url, stop = serveConfig(t, quietConfig(dir, peer.URL))
	defer func() { _ = stop() }()
	for series, want := range map[string]float64{
		"kvindex_peer_bootstrap_skipped_partitions_total": 1, // broken
		"kvindex_peer_bootstrap_skipped_events_total":     2, // worker 7's, in other
		"kvindex_peer_bootstrap_events_total":             1, // worker 8's
	} {
		if got := scrapeValue(t, url, series); got != want {
			t.Errorf("%s %v, want %v", series, got, want)
		}
	}
}

// serveUnrecovered opens a server and serves its API before its Recover (answering 503 where
// readiness is needed), closing both at cleanup.
func serveUnrecovered(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		_ = s.Close()
	})
	return s, ts.URL
}

// TestPeersBootstrapFromADynamoShapedDump checks the rules "a Dynamo peer's dump bootstraps
// kvindex: fields kvindex does not know (residency_domain, start_position, mm_extra_info) are
// ignored, under --strict too; a key with two colons splits at the first; an {\"error\"}
// partition is skipped and logged, the others applied".
func TestPeersBootstrapFromADynamoShapedDump(t *testing.T) {
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"mistral:team:a":{"block_size":4,"events":[
		 {"worker_id":7,"storage_tier":"device","residency_domain":{"kind":"local"},"event":{"event_id":3,"dp_rank":0,"data":{"stored":{"parent_hash":null,"start_position":0,
		  "blocks":[{"block_hash":701,"tokens_hash":14643705804678351452,"mm_extra_info":null},{"block_hash":702,"tokens_hash":16777012769546811212,"mm_extra_info":{"mm_hashes":[]}}]}}}}]},
		 "broken:default":{"error":"dump failed"}}`)
	}))
	defer peer.Close()
	cfg := quietConfig(t.TempDir(), peer.URL)
	cfg.Strict = true
	_, url, stop := serveConfig(t, cfg)
	defer func() { _ = stop() }()
	q := `{"token_ids":[1,2,3,4,5,6,7,8],"model_name":"mistral","routing_group":"team:a"}`
	if code, body := call(t, "POST", url+"/query", q); code != 200 || !strings.Contains(body, `"scores":{"7":{"0":8}}`) {
		t.Fatalf("/query mistral / team:a: %d %s, want worker 7 with 8 tokens", code, body)
	}
	if code, body := call(t, "POST", url+"/query", `{"token_ids":[1,2,3,4],"model_name":"mistral","routing_group":"team"}`); code != 404 {
		t.Errorf("/query mistral / team (the last-colon reading): %d %s, want 404", code, body)
	}
	if code, body := call(t, "POST", url+"/query", `{"token_ids":[1,2,3,4],"model_name":"broken"}`); code != 404 {
		t.Errorf("/query of the peer's {\"error\"} partition: %d %s, want 404", code, body)
	}
}

// TestPeersBootstrapLogLevels checks the rule "a peer that is starting itself (503, as two
// replicas that name each other answer on a first start) is no failure: logged as information
// with what happens next; a peer that cannot be reached is a warning; a peer that answers
// anything else is an error" — and, the README's pair, that two replicas started as each other's
// peers log no error.
func TestPeersBootstrapLogLevels(t *testing.T) {
	// A kvindex that is itself starting: served, not yet recovered, so /dump answers 503.
	_, startingURL := serveUnrecovered(t, quietConfig(t.TempDir()))
	unauthorized := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
	}))
	defer unauthorized.Close()
	unreachable := "http://127.0.0.1:1"

	for _, tc := range []struct {
		name  string
		peers []string
		lines []string // regexps, in order
	}{
		{"starting", []string{startingURL},
			[]string{`level=INFO msg="peer bootstrap: no dump from this peer; trying the next" .*starting itself \(503 not ready\)`,
				`level=INFO msg="peer bootstrap: every peer is starting itself .*; empty partitions start empty and fill from their event sources`}},
		{"unreachable and starting", []string{unreachable, startingURL},
			[]string{`level=WARN msg="peer bootstrap: no dump from this peer; trying the next" peer=http://127.0.0.1:1 .*connection refused`,
				`level=INFO msg="peer bootstrap: no dump from this peer; trying the next"`,
				`level=WARN msg="peer bootstrap: no peer could be reached or was ready; empty partitions start empty .*check that --peers names running kvindex replicas"`}},
		{"an error answer", []string{startingURL, unauthorized.URL},
			[]string{`level=INFO msg="peer bootstrap: no dump from this peer; trying the next"`,
				`level=ERROR msg="peer bootstrap: no dump from this peer; trying the next" .*401 Unauthorized`,
				`level=ERROR msg="peer bootstrap failed: a peer answered with an error .*fix --peers or the peer"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuf
			cfg := quietConfig(t.TempDir(), tc.peers...)
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			_, _, stop := serveConfig(t, cfg)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "peer bootstrap") && !strings.Contains(line, "asking for a dump") {
					got = append(got, line)
				}
			}
			if len(got) != len(tc.lines) {
				t.Fatalf("bootstrap lines:\n%s\nwant %d matching %q", strings.Join(got, "\n"), len(tc.lines), tc.lines)
			}
			for i, re := range tc.lines {
				if !regexp.MustCompile(re).MatchString(got[i]) {
					t.Errorf("line %d: %s\nwant it to match %s", i, got[i], re)
				}
			}
		})
	}

	// The README's pair: each names the other, both start at once; neither logs an error.
	t.Run("pair", func(t *testing.T) {
		// Both sockets are bound before either replica starts: the first one dials the second's
		// address at once, and a dial from an ephemeral port could otherwise take that port.
		var lns [2]net.Listener
		var addrs [2]string
		for i := range lns {
			lns[i], addrs[i] = localListener(t)
		}
		var logs [2]syncBuf
		for i := range addrs {
			cfg := quietConfig(filepath.Join(t.TempDir(), "data"), "http://"+addrs[1-i])
			cfg.Listener, cfg.Logger = lns[i], slog.New(slog.NewTextHandler(&logs[i], nil))
			runServer(t, cfg)
		}
		for i, a := range addrs {
			waitFor(t, "replica "+a+" ready", func() bool {
				code, _, _ := doReqNoFatal(http.DefaultClient, "GET", "http://"+a+"/readyz")
				return code == http.StatusOK
			})
			if out := logs[i].String(); strings.Contains(out, "level=ERROR") {
				t.Errorf("replica %d logged an error on a first start:\n%s", i, out)
			}
		}
	})
}
