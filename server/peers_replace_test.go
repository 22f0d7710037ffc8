package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/partition"
)

// Issue 35's seam for the peers door (serve --peers: each partition empty at start is filled
// from a peer's /dump): worker 5, bootstrapped into llama, is removed (DELETE /v1/workers/5,
// which drops the emptied llama); the server restarts and the same peer's dump bootstraps it
// again: worker 5 is in llama (no partition unknown-<id>), scores there, and a post of its
// events into another partition is 409. A worker that joined another partition in between
// keeps it: the dump's events of it are skipped.
func TestPeersWorkerPlacedAgainAfterRemoval(t *testing.T) {
	peer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"llama:default":{"block_size":4,"events":[
		 {"worker_id":5,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":501,"tokens_hash":50},{"block_hash":502,"tokens_hash":51}]}}}},
		 {"worker_id":6,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":601,"tokens_hash":50}]}}}}]}}`)
	}))
	defer peer.Close()
	dir := t.TempDir()
	const query = `{"block_hashes":[50,51],"model_name":"llama"}`
	const fix = "post with ?model_name=llama, or remove the worker first (DELETE /v1/workers/5)"
	post := func(url, model string) (int, string) {
		return call(t, "POST", url+"/v1/events?model_name="+model,
			`[{"worker_id":5,"event":{"event_id":99,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":599,"tokens_hash":59}]}}}}]`)
	}
	check := func(url, when string) {
		t.Helper()
		waitBody(t, "POST", url+"/v1/find_matches", query, `"worker_id":5,"dp_rank":0,"score":2`)
		if _, ranks := call(t, "GET", url+"/v1/ranks", ""); strings.Contains(ranks, "unknown-") ||
			strings.Count(ranks, `"model_name":"llama"`) != 2 {
			t.Fatalf("%s: GET /v1/ranks: %s, want workers 5 and 6 in llama", when, ranks)
		}
		if code, body := post(url, "other"); code != http.StatusConflict || !strings.Contains(body, fix) {
			t.Fatalf("%s: post of worker 5 into another partition: %d %s, want 409 saying %q", when, code, body, fix)
		}
	}

	s, url, stop := serveConfig(t, quietConfig(dir, peer.URL))
	check(url, "bootstrapped")
	for _, w := range []string{"5", "6"} {
		if code, body := call(t, "DELETE", url+"/v1/workers/"+w, ""); code != 200 {
			t.Fatalf("DELETE /v1/workers/%s: %d %s", w, code, body)
		}
	}
	if _, ok := s.e.Partitions().Lookup(partition.KeyOf("llama", "", "")); ok {
		t.Fatal("partition llama is still there after its workers were removed")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	s, url, stop = serveConfig(t, quietConfig(dir, peer.URL))
	check(url, "bootstrapped again after the removal")

	// Worker 5 leaves llama and joins other over HTTP; llama emptied again (worker 6 too), the
	// next start's bootstrap skips the dump's events of worker 5: it stays in other.
	for _, w := range []string{"5", "6"} {
		if code, body := call(t, "DELETE", url+"/v1/workers/"+w, ""); code != 200 {
			t.Fatalf("DELETE /v1/workers/%s: %d %s", w, code, body)
		}
	}
	if code, body := post(url, "other"); code != 200 {
		t.Fatalf("post of worker 5 into other after its removal: %d %s", code, body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	s, url, stop = serveConfig(t, quietConfig(dir, peer.URL))
	defer func() { _ = stop() }()
	waitBody(t, "POST", url+"/v1/find_matches", query, `"worker_id":6,"dp_rank":0,"score":1`)
	if code, body := call(t, "POST", url+"/v1/find_matches", query); code != 200 || strings.Contains(body, `"worker_id":5`) {
		t.Fatalf("worker 5 of partition other scored in llama after the bootstrap: %d %s", code, body)
	}
	if code, body := call(t, "POST", url+"/v1/find_matches", `{"block_hashes":[59],"model_name":"other"}`); code != 200 ||
		!strings.Contains(body, `"worker_id":5,"dp_rank":0,"score":1`) {
		t.Fatalf("worker 5 no longer scores in other: %d %s", code, body)
	}
	if own, ok := s.workerPartition(5); !ok || s.e.Partitions().Get(own).Key != partition.KeyOf("other", "", "") {
		t.Fatalf("worker 5's partition after the bootstrap: %v %v, want other", own, ok)
	}
}
