package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// Seams between the doors and the partitions (issue 21): each test names the seam it guards.

// Seam: DELETE scoped to a partition. A given partition that is not the worker's answers as for
// an unknown worker (0 ranks removed, nothing touched), for the worker route as for the rank
// route; the worker's own partition removes it.
func TestDeleteScopedToAnotherPartitionRemovesNothing(t *testing.T) {
	g := newPartitionRig(t)
	blocks := []event.Block{{BlockHash: 11, TokensHash: 1}}
	if code, body := g.do("POST", "/v1/events?model_name=mA", eventsJSON(event.Stored(event.Rank{WorkerID: 81}, 1, nil, blocks...),
		event.Stored(event.Rank{WorkerID: 82}, 1, nil, blocks...))); code != 200 {
		t.Fatalf("events: %d %s", code, body)
	}
	if code, body := g.do("POST", "/v1/events?model_name=mB", eventsJSON(event.Stored(event.Rank{WorkerID: 83}, 1, nil, blocks...))); code != 200 {
		t.Fatalf("events: %d %s", code, body)
	}
	for _, tc := range []struct{ method, path, want string }{
		{"DELETE", "/v1/workers/81?model_name=mB", `{"removed_ranks":0}`},
		{"DELETE", "/v1/workers/82/ranks/0?model_name=mB", `{"removed_ranks":0}`},
		{"DELETE", "/v1/workers/81?model_name=nope", `{"removed_ranks":0}`},
		{"DELETE", "/v1/workers/81?model_nme=mA", ""}, // a typo is a 400, never "every partition"
	} {
		code, body := g.do(tc.method, tc.path, "")
		if tc.want == "" {
			if code != http.StatusBadRequest {
				t.Errorf("%s %s: %d %s, want 400", tc.method, tc.path, code, body)
			}
			continue
		}
		if code != 200 || body != tc.want {
			t.Errorf("%s %s: %d %s, want %s", tc.method, tc.path, code, body, tc.want)
		}
	}
	if _, body := g.do("POST", "/v1/find_matches?model_name=mA", `{"block_hashes":[1]}`); !strings.Contains(body, `"worker_id":81`) || !strings.Contains(body, `"worker_id":82`) {
		t.Fatalf("scoped deletes of another partition removed something: %s", body)
	}
	if code, body := g.do("DELETE", "/v1/workers/81?model_name=mA", ""); code != 200 || body != `{"removed_ranks":1}` {
		t.Errorf("delete in the worker's own partition: %d %s", code, body)
	}
	if code, body := g.do("DELETE", "/v1/workers/82", ""); code != 200 || body != `{"removed_ranks":1}` {
		t.Errorf("delete without a partition (the worker's own): %d %s", code, body)
	}
	if _, body := g.do("POST", "/v1/find_matches?model_name=mB", `{"block_hashes":[1]}`); !strings.Contains(body, `"worker_id":83`) {
		t.Errorf("mB lost its rank: %s", body)
	}
}

// Seam: export → import. GET /v1/dump without a partition is the whole index: every partition
// after its partition line, with its block size; posted as NDJSON to an empty server it restores
// every partition (names, block sizes, tiers, scores), and a dump of the restored server is the
// same bytes.
func TestWholeDumpRestoresEveryPartition(t *testing.T) {
	g := newPartitionRig(t)
	rk := func(w uint64) event.Rank { return event.Rank{WorkerID: w} }
	host := event.Stored(rk(3), 2, nil, event.Block{BlockHash: 31, TokensHash: 9})
	host.Tier = event.TierHostPinned
	// llama has its own block size: registered first through Dynamo's route.
	if code, body := g.do("POST", "/register", `{"instance_id":9,"endpoint":"tcp://127.0.0.1:1","block_size":32,"model_name":"llama"}`); code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	for _, p := range []struct {
		query string
		evs   []event.RouterEvent
	}{
		{"", []event.RouterEvent{event.Stored(rk(1), 1, nil, event.Block{BlockHash: 11, TokensHash: 1}, event.Block{BlockHash: 12, TokensHash: 2})}},
		{"?model_name=llama", []event.RouterEvent{event.Stored(rk(3), 1, nil, event.Block{BlockHash: 21, TokensHash: 1}), host}},
		{"?model_name=qwen&routing_group=blue", []event.RouterEvent{event.Stored(rk(5), 1, nil, event.Block{BlockHash: 41, TokensHash: 1})}},
	} {
		if code, body := g.do("POST", "/v1/events"+p.query, eventsJSON(p.evs...)); code != 200 {
			t.Fatalf("events%s: %d %s", p.query, code, body)
		}
	}
	_, dump := g.do("GET", "/v1/dump", "")
	for _, want := range []string{
		`{"partition":{"model_name":"default","routing_group":"default","block_size":16}}`,
		`{"partition":{"model_name":"llama","routing_group":"default","block_size":32}}`,
		`{"partition":{"model_name":"qwen","routing_group":"blue","block_size":16}}`,
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("the whole dump lacks %s:\n%s", want, dump)
		}
	}
	fresh := newPartitionRig(t)
	fresh.cfg.BlockSize = 64 // the restored partitions keep their own block sizes, not this one
	fresh.close()
	fresh.open()
	if code, body := fresh.doType("POST", "/v1/events", "application/x-ndjson", dump+"\n"); code != 200 {
		t.Fatalf("posting the whole dump: %d %s", code, body)
	}
	_, again := fresh.do("GET", "/v1/dump", "")
	if again != strings.TrimSpace(dump) {
		t.Errorf("the restored server dumps\n%s\nwant\n%s", again, dump)
	}
	for _, q := range []string{"", "?model_name=llama", "?model_name=qwen&routing_group=blue"} {
		_, a := g.do("POST", "/v1/find_matches"+q, `{"block_hashes":[1,2,9]}`)
		_, b := fresh.do("POST", "/v1/find_matches"+q, `{"block_hashes":[1,2,9]}`)
		if a != b || a == `{"scores":[]}` {
			t.Errorf("find_matches%s: restored %s, original %s", q, b, a)
		}
	}
	var rows []rankJSON
	_, ranks := fresh.do("GET", "/v1/ranks", "")
	if err := json.Unmarshal([]byte(ranks), &rows); err != nil || len(rows) != 3 {
		t.Fatalf("restored ranks: %s", ranks)
	}
	for _, r := range rows {
		want := map[string]int{"default": 16, "llama": 32, "qwen": 16}[r.ModelName]
		p, ok := fresh.s.parts.Lookup(partition.KeyOf(r.ModelName, r.RoutingGroup, ""))
		if !ok || p.BlockSize != want {
			t.Errorf("rank %d/%d restored into %s:%s (found %v), want block size %d", r.WorkerID, r.DPRank, r.ModelName, r.RoutingGroup, ok, want)
		}
	}
	// A body whose later partition refuses a worker (it belongs to another partition) writes
	// nothing of its earlier partitions either.
	clash := string(partition.AppendLine(nil, partition.Key{ModelName: "fresh", RoutingGroup: "default"}, 16)) +
		strings.TrimSpace(eventsJSON(event.Stored(rk(70), 1, nil, event.Block{BlockHash: 71, TokensHash: 1})))[1:] + "\n"
	clash = strings.Replace(clash, "}]\n", "}\n", 1)
	clash += string(partition.AppendLine(nil, partition.Key{ModelName: "qwen", RoutingGroup: "blue"}, 16))
	line1 := eventsJSON(event.Stored(rk(1), 9, nil, event.Block{BlockHash: 72, TokensHash: 1})) // worker 1 is default's
	clash += line1[1:len(line1)-1] + "\n"
	code, body := fresh.doType("POST", "/v1/events", "application/x-ndjson", clash)
	if code != http.StatusConflict || !strings.Contains(body, `"index":1`) {
		t.Errorf("a worker of another partition in the second segment: %d %s, want 409 naming index 1", code, body)
	}
	if _, ok := fresh.s.parts.Lookup(partition.Key{ModelName: "fresh", RoutingGroup: "default"}); ok {
		t.Errorf("the refused body created partition fresh")
	}
	// A partition line that does not parse refuses the whole body.
	line := eventsJSON(event.Cleared(rk(1), 9))
	bad := `{"partition":{"model_name":""` + "\n" + line[1:len(line)-1] + "\n"
	if code, body := fresh.doType("POST", "/v1/events", "application/x-ndjson", bad); code != http.StatusBadRequest {
		t.Errorf("a bad partition line: %d %s, want 400", code, body)
	}
}
