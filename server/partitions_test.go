package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/wal"
)

// partitionRig is a server on a dir that survives restarts.
type partitionRig struct {
	t   *testing.T
	dir string
	cfg Config // beyond the data dir, logger, durability and lanes
	s   *Server
	ts  *httptest.Server
}

func newPartitionRig(t *testing.T) *partitionRig {
	g := &partitionRig{t: t, dir: t.TempDir()}
	g.open()
	t.Cleanup(g.close)
	return g
}

func (g *partitionRig) open() {
	cfg := g.cfg
	cfg.DataDir, cfg.Logger, cfg.Durability, cfg.Lanes = g.dir, slog.New(slog.NewTextHandler(io.Discard, nil)), wal.NoSync, 2
	s, err := Open(cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	if err := s.Recover(context.Background()); err != nil {
		g.t.Fatal(err)
	}
	g.s, g.ts = s, httptest.NewServer(s.Handler())
}

func (g *partitionRig) close() {
	if g.s == nil {
		return
	}
	g.ts.Close()
	if err := g.s.Close(); err != nil {
		g.t.Error(err)
	}
	g.s = nil
}

func (g *partitionRig) do(method, path, body string) (int, string) {
	g.t.Helper()
	return g.doType(method, path, "application/json", body)
}

func (g *partitionRig) doType(method, path, ctype, body string) (int, string) {
	g.t.Helper()
	req, _ := http.NewRequest(method, g.ts.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// rangeAnswer GETs a rank's range and describes the answer (describe), or its status and body
// when it is not a 200 range answer.
func (g *partitionRig) rangeAnswer(path string) string {
	g.t.Helper()
	code, body := g.do("GET", path, "")
	if code != http.StatusOK {
		return fmt.Sprintf("%d %s", code, body)
	}
	a, err := recovery.DecodeAnswer([]byte(body))
	if err != nil {
		return fmt.Sprintf("%v in %s", err, body)
	}
	return describe(a)
}

func eventsJSON(evs ...event.RouterEvent) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range evs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(event.AppendJSON(nil, &evs[i]))
	}
	b.WriteByte(']')
	return b.String()
}

// TestPartitionsNeverSeeEachOther (docs/CONTRACT.md §9): two partitions holding the same hashes answer only
// their own ranks, before and after a restart; reads of an unknown partition create nothing; a
// worker with ranks in one partition is refused (409, naming the event) in another.
func TestPartitionsNeverSeeEachOther(t *testing.T) {
	g := newPartitionRig(t)
	blocks := []event.Block{{BlockHash: 11, TokensHash: 1}, {BlockHash: 12, TokensHash: 2}}
	a := event.Stored(event.Rank{WorkerID: 1}, 1, nil, blocks...)
	b := event.Stored(event.Rank{WorkerID: 2}, 1, nil, blocks[:1]...)
	if code, body := g.do("POST", "/v1/events?model_name=llama", eventsJSON(a)); code != 200 {
		t.Fatalf("llama: %d %s", code, body)
	}
	if code, body := g.do("POST", "/v1/events?model_name=qwen&routing_group=lora-a", eventsJSON(b)); code != 200 {
		t.Fatalf("qwen: %d %s", code, body)
	}
	check := func(when string) {
		t.Helper()
		for _, tc := range []struct{ query, body, want string }{
			{"", `{"block_hashes":[1,2]}`, `{"scores":[]}`},
			{"", `{"block_hashes":[1,2],"model_name":"llama"}`, `{"scores":[{"worker_id":1,"dp_rank":0,"score":2,"tree_size":2}]}`},
			{"?model_name=qwen&routing_group=lora-a", `{"block_hashes":[1,2]}`, `{"scores":[{"worker_id":2,"dp_rank":0,"score":1,"tree_size":1}]}`},
			{"?model_name=qwen", `{"block_hashes":[1,2]}`, `{"scores":[]}`},
			// tenant_id is ignored (docs/CONTRACT.md §9): it never selects a routing group, in the body or the query.
			{"", `{"block_hashes":[1],"model_name":"qwen","tenant_id":"lora-a"}`, `{"scores":[]}`},
			{"?model_name=qwen&tenant_id=lora-a", `{"block_hashes":[1]}`, `{"scores":[]}`},
		} {
			if code, body := g.do("POST", "/v1/find_matches"+tc.query, tc.body); code != 200 || body != tc.want {
				t.Errorf("%s: find_matches%s %s = %d %s, want %s", when, tc.query, tc.body, code, body, tc.want)
			}
		}
		_, ranks := g.do("GET", "/v1/ranks", "")
		var rows []rankJSON
		if err := json.Unmarshal([]byte(ranks), &rows); err != nil || len(rows) != 2 ||
			rows[0].ModelName != "llama" || rows[1].ModelName != "qwen" || rows[1].RoutingGroup != "lora-a" {
			t.Errorf("%s: /v1/ranks %s", when, ranks)
		}
		if _, only := g.do("GET", "/v1/ranks?model_name=llama", ""); !strings.Contains(only, `"worker_id":1`) || strings.Contains(only, `"worker_id":2`) {
			t.Errorf("%s: /v1/ranks?model_name=llama %s", when, only)
		}
		// A rank's range: in the partition the query names (the worker's own, or none: an
		// unknown rank's empty dump), else in the worker's own.
		for _, tc := range []struct{ path, want string }{
			{"/v1/ranks/1/0/events?start=1", "Events[1] last=1"},
			{"/v1/ranks/1/0/events", "TreeDump blocks=2 last=1"},
			{"/v1/ranks/1/0/events?start=1&model_name=llama", "Events[1] last=1"},
			{"/v1/ranks/1/0/events?start=1&model_name=qwen&routing_group=lora-a", "TreeDump blocks=0 last=0"},
			{"/v1/ranks/1/0/events?model_name=nope", "TreeDump blocks=0 last=0"},
			{"/v1/ranks/2/0/events?start=1&model_name=qwen&routing_group=lora-a", "Events[1] last=1"},
			{"/v1/ranks/2/0/events?start=1&model_name=qwen", "TreeDump blocks=0 last=0"},
			{"/v1/ranks/2/0/events?start=1&model_name=llama", "TreeDump blocks=0 last=0"},
		} {
			if got := g.rangeAnswer(tc.path); got != tc.want {
				t.Errorf("%s: GET %s = %s, want %s", when, tc.path, got, tc.want)
			}
		}
	}
	check("before restart")
	g.close()
	g.open()
	check("after restart")

	// Worker 1 belongs to llama: an event of it in the default partition is refused whole.
	c := event.Stored(event.Rank{WorkerID: 3}, 1, nil, blocks...)
	d := event.Stored(event.Rank{WorkerID: 1, DPRank: 1}, 1, nil, blocks...)
	if code, body := g.do("POST", "/v1/events", eventsJSON(c, d)); code != http.StatusConflict || !strings.Contains(body, `"index":1`) {
		t.Errorf("a worker of another partition: %d %s, want 409 naming index 1", code, body)
	}
	if code, body := g.do("POST", "/v1/find_matches", `{"block_hashes":[1]}`); body != `{"scores":[]}` {
		t.Errorf("the refused batch wrote something: %d %s", code, body)
	}
	// Unknown partitions: reads answer empty and create nothing.
	n := len(g.s.e.Partitions().All())
	g.do("POST", "/v1/find_matches?model_name=nope", `{"block_hashes":[1]}`)
	g.do("GET", "/v1/ranks?model_name=nope", "")
	g.do("GET", "/v1/dump?model_name=nope", "")
	if got := g.rangeAnswer("/v1/ranks/1/0/events?model_name=nope"); got != "TreeDump blocks=0 last=0" {
		t.Errorf("range of an unknown partition: %s, want an empty TreeDump", got)
	}
	if got := len(g.s.e.Partitions().All()); got != n {
		t.Errorf("reads created %d partitions", got-n)
	}
	// Removing the worker releases it: it may join another partition.
	g.do("DELETE", "/v1/workers/1", "")
	if code, body := g.do("POST", "/v1/events", eventsJSON(d)); code != 200 {
		t.Errorf("a removed worker in another partition: %d %s", code, body)
	}
}

// TestDeleteDropsTheEmptiedPartition checks the rule "a partition whose last worker leaves by
// DELETE /v1/workers/{id} is dropped, durably: Dynamo's /query answers 404, /v1/dump omits it, a
// restart does not bring it back, and a later write may create it with another block size; a
// partition with a worker left is kept".
func TestDeleteDropsTheEmptiedPartition(t *testing.T) {
	g := newPartitionRig(t)
	ev := func(w int) string {
		return fmt.Sprintf(`[{"worker_id":%d,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}]`, w)
	}
	for _, w := range []int{1, 2} {
		if code, body := g.do("POST", "/v1/events?model_name=llama", ev(w)); code != 200 {
			t.Fatalf("events of %d: %d %s", w, code, body)
		}
	}
	q := `{"block_hashes":[2],"model_name":"llama"}`
	if code, body := g.do("DELETE", "/v1/workers/1", ""); code != 200 {
		t.Fatalf("DELETE 1: %d %s", code, body)
	}
	if code, body := g.do("POST", "/query_by_hash", q); code != 200 || !strings.Contains(body, `"2":{"0":16}`) {
		t.Fatalf("worker 2 is left: %d %s", code, body)
	}
	if code, body := g.do("DELETE", "/v1/workers/2", ""); code != 200 {
		t.Fatalf("DELETE 2: %d %s", code, body)
	}
	check := func(when string) {
		t.Helper()
		if code, body := g.do("POST", "/query_by_hash", q); code != 404 {
			t.Errorf("%s: /query_by_hash of the emptied partition: %d %s, want 404", when, code, body)
		}
		if _, body := g.do("GET", "/v1/dump", ""); strings.Contains(body, "llama") {
			t.Errorf("%s: /v1/dump names the dropped partition: %s", when, body)
		}
	}
	check("after the last DELETE")
	g.close()
	g.open()
	check("after a restart")
	body := "{\"partition\":{\"model_name\":\"llama\",\"routing_group\":\"default\",\"block_size\":32}}\n" +
		`{"worker_id":3,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}` + "\n"
	if code, got := g.doType("POST", "/v1/events", "application/x-ndjson", body); code != 200 {
		t.Fatalf("llama again with block size 32: %d %s", code, got)
	}
	if code, got := g.do("POST", "/query_by_hash", q); code != 200 || !strings.Contains(got, `"3":{"0":32}`) {
		t.Fatalf("the new llama partition: %d %s, want worker 3 with 32 tokens", code, got)
	}
}

// TestStartDropsLeftPartitions checks the rule "at start, a partition nothing is left in (a
// record only: its last worker left in a crash before the drop, or under a kvindex that did not
// drop partitions) is dropped; one with a registration is kept".
func TestStartDropsLeftPartitions(t *testing.T) {
	g := newPartitionRig(t)
	ctx := context.Background()
	if _, err := g.s.parts.Ensure(ctx, partition.Key{ModelName: "left", RoutingGroup: "default"}, 4); err != nil {
		t.Fatal(err)
	}
	if code, body := g.do("POST", "/register", `{"instance_id":5,"endpoint":"tcp://127.0.0.1:1","model_name":"kept","block_size":8}`); code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	g.close()
	g.open()
	if _, ok := g.s.parts.Lookup(partition.Key{ModelName: "left", RoutingGroup: "default"}); ok {
		t.Error("a partition with nothing left came back after a restart")
	}
	if code, body := g.do("POST", "/query", `{"token_ids":[1,2,3,4,5,6,7,8],"model_name":"kept"}`); code != 200 {
		t.Errorf("the registered partition after a restart: %d %s, want 200", code, body)
	}
	if code, body := g.do("POST", "/register", `{"instance_id":6,"endpoint":"tcp://127.0.0.1:1","model_name":"left","block_size":16}`); code != 201 {
		t.Errorf("register left with another block size: %d %s, want 201", code, body)
	}
}
