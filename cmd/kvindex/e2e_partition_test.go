package main

import (
	"encoding/json"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/event"
)

// TestPartitionSeamsEndToEnd drives the real binary with every door that writes over HTTP into
// non-default partitions — /v1/events, Dynamo's /register (block size 32), routing decisions —
// then: kill -9 and restart (nothing acknowledged lost, ranks back in their partitions), the
// whole GET /v1/dump posted to an empty second binary (every partition and block size back,
// same answers), and `kvindex verify` clean on the stopped data dir.
func TestPartitionSeamsEndToEnd(t *testing.T) {
	dir := t.TempDir()
	a := start(t, dir)
	a.waitReady()
	if code, b := a.post("/register", `{"instance_id":50,"endpoint":"tcp://127.0.0.1:1","block_size":32,"model_name":"mistral"}`); code != 201 {
		t.Fatalf("register: %d %s", code, b)
	}
	gens := map[string][]*chainGen{
		"?model_name=llama":                   {newChainGen(event.Rank{WorkerID: 21}, 0), newChainGen(event.Rank{WorkerID: 21, DPRank: 1}, 1_000_000)},
		"?model_name=qwen&routing_group=blue": {newChainGen(event.Rank{WorkerID: 31}, 2_000_000)},
		"?model_name=mistral":                 {newChainGen(event.Rank{WorkerID: 50}, 3_000_000)},
		"":                                    {newChainGen(event.Rank{WorkerID: 1}, 4_000_000)},
	}
	for range 8 {
		for part, gs := range gens {
			for _, g := range gs {
				a.mustPost("/v1/events"+part, jsonEvents(g.next(2)...))
			}
		}
	}
	a.mustPost("/v1/routing_decisions", `{"worker_id":22,"block_hashes":[7,8,9],"model_name":"llama"}`)
	answers := func(p *proc) map[string]string {
		out := map[string]string{}
		for part, gs := range gens {
			for _, g := range gs {
				q := make([]uint64, 0, len(g.chain))
				for _, h := range g.chain {
					q = append(q, h%1000)
				}
				body, _ := json.Marshal(map[string]any{"block_hashes": q})
				out[part+string(body)] = string(p.mustPost("/v1/find_matches"+part, string(body)))
			}
		}
		out["decision"] = string(p.mustPost("/v1/find_matches?model_name=llama", `{"block_hashes":[7,8,9]}`))
		return out
	}
	before := answers(a)
	if !strings.Contains(before["decision"], `"worker_id":22,"dp_rank":0,"score":3`) {
		t.Fatalf("the routing decision does not score: %s", before["decision"])
	}
	// Lanes are assigned in order of first sight, and the restart replay sees ranks in its own
	// order: a rank's lane is not part of what must survive.
	ranks := func(p *proc) []rankRow {
		rows := p.ranks()
		for i := range rows {
			rows[i].Lane = -1
		}
		return rows
	}
	rowsBefore := ranks(a)

	a.kill()
	a = start(t, dir)
	a.waitReady()
	if got := answers(a); !reflect.DeepEqual(got, before) {
		t.Fatalf("after kill -9:\n%v\nwant\n%v", got, before)
	}
	if got := ranks(a); !reflect.DeepEqual(got, rowsBefore) {
		t.Fatalf("ranks after kill -9:\n%+v\nwant\n%+v", got, rowsBefore)
	}

	code, dump := a.do("GET", "/v1/dump", "", nil)
	if code != 200 || !strings.Contains(string(dump), `{"partition":{"model_name":"mistral","routing_group":"default","block_size":32}}`) {
		t.Fatalf("whole dump: %d %s", code, dump)
	}
	b := start(t, t.TempDir())
	b.waitReady()
	if code, body := b.do("POST", "/v1/events", "application/x-ndjson", dump); code != 200 {
		t.Fatalf("importing the dump: %d %s", code, body)
	}
	got := answers(b)
	delete(got, "decision") // a dump carries the event-fed index, not the side entries (their TTL)
	want := answers(a)
	delete(want, "decision")
	for k := range want { // tree_size is the same; scores too
		if got[k] != want[k] {
			t.Errorf("imported %s: %s, want %s", k, got[k], want[k])
		}
	}
	code, body := b.do("POST", "/query", "", []byte(`{"token_ids":[1,2,3],"model_name":"mistral"}`))
	if code != 200 {
		t.Errorf("/query in the imported mistral partition: %d %s", code, body)
	}
	b.stop()

	a.stop()
	out, err := exec.Command(binPath, "verify", "--data-dir", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "clean") {
		t.Errorf("verify: %v\n%s", err, out)
	}
}
