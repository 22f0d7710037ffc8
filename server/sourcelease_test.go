package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/wal"
)

func leasesOf(t *testing.T, url string) map[uint64]leaseJSON {
	t.Helper()
	code, body := call(t, "GET", url+"/v1/leases", "")
	if code != 200 {
		t.Fatalf("GET /v1/leases: %d %s", code, body)
	}
	var ls []leaseJSON
	if err := json.Unmarshal([]byte(body), &ls); err != nil {
		t.Fatal(err)
	}
	out := map[uint64]leaseJSON{}
	for _, l := range ls {
		out[l.WorkerID] = l
	}
	return out
}

// TestRegisterLeaseAndSourceLease: /register's lease_ttl_ms is the instance's lease (as PUT
// /v1/workers/{id}/lease: not renewed by its events, renewed by registering again, ended by
// /unregister); a bad one is 400 and registers nothing. With --source-lease, an instance
// registered without a lease holds one its events imply and renew. A worker fed by POST
// /v1/events never gets one. Outcomes count per source kind (dynamo, http). All in a partition
// other than the default.
func TestRegisterLeaseAndSourceLease(t *testing.T) {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	_, url, stop := serveConfig(t, Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Durability: wal.NoSync, Lanes: 2, Now: c.Now, LeaseGrace: time.Hour, SourceLease: 10 * time.Second})
	defer func() { _ = stop() }()
	pubA, pubB := startZMQPub(t), startZMQPub(t)
	reg := func(inst, ep, lease string) string {
		return `{"instance_id":` + inst + `,"endpoint":"` + ep + `","model_name":"llama","routing_group":"blue","block_size":4` + lease + `}`
	}
	for _, bad := range []string{`,"lease_ttl_ms":0`, `,"lease_ttl_ms":31536000001`} {
		if code, body := call(t, "POST", url+"/register", reg("42", pubA.ep, bad)); code != 400 || !strings.Contains(body, "lease_ttl_ms") {
			t.Fatalf("register with %s: %d %s, want 400", bad, code, body)
		}
	}
	if code, body := call(t, "POST", url+"/register", reg("42", pubA.ep, `,"lease_ttl_ms":"5s"`)); code != 422 {
		t.Fatalf("register with a string lease: %d %s, want 422", code, body)
	}
	if code, body := call(t, "GET", url+"/workers", ""); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("a refused register registered: %s", body)
	}
	if ls := leasesOf(t, url); len(ls) != 0 {
		t.Fatalf("a refused register took a lease: %+v", ls)
	}

	if code, body := call(t, "POST", url+"/register", reg("42", pubA.ep, `,"lease_ttl_ms":5000`)); code != 201 {
		t.Fatalf("register with a lease: %d %s", code, body)
	}
	if code, body := call(t, "POST", url+"/register", reg("43", pubB.ep, "")); code != 201 {
		t.Fatalf("register without a lease: %d %s", code, body)
	}
	if code, body := call(t, "POST", url+"/v1/events?model_name=llama&routing_group=blue", eventsJSON(
		event.Stored(event.Rank{WorkerID: 9}, 1, nil, event.Block{BlockHash: 1, TokensHash: event.BlockHashes([]uint32{1, 2, 3, 4}, 4, "", "")[0]}))); code != 200 {
		t.Fatalf("events of worker 9: %d %s", code, body)
	}
	if l := leasesOf(t, url)[42]; l.TTLMs != 5000 || l.Implied || l.State != "live" {
		t.Fatalf("the registration's lease: %+v", l)
	}
	pubA.waitSubscribed()
	pubB.waitSubscribed()
	pubA.send("kv@pod@llama", 0, vllmFixture(t, "stored_map"))
	pubB.send("kv@pod@llama", 0, vllmFixture(t, "stored_map"))
	query := `{"token_ids":[1,2,3,4],"model_name":"llama","routing_group":"blue"}`
	waitBody(t, "POST", url+"/query", query, `"scores":{"42":{"0":4},"43":{"0":4},"9":{"0":4}}`)
	ls := leasesOf(t, url)
	if l := ls[43]; l.TTLMs != 10000 || !l.Implied || l.State != "live" {
		t.Fatalf("the source-implied lease: %+v", l)
	}
	if l := ls[42]; l.TTLMs != 5000 || l.Implied {
		t.Fatalf("the source took over the registration's lease: %+v", l)
	}
	if _, ok := ls[9]; ok {
		t.Fatal("a worker fed by POST /v1/events got a lease")
	}

	c.Advance(5 * time.Second) // 42's lease expires; 43's implied one is 5 s ahead
	waitBody(t, "POST", url+"/query", query, `"scores":{"43":{"0":4},"9":{"0":4}}`)
	if code, body := call(t, "POST", url+"/register", reg("42", pubA.ep, `,"lease_ttl_ms":5000`)); code != 201 {
		t.Fatalf("register again: %d %s", code, body)
	}
	waitBody(t, "POST", url+"/query", query, `"scores":{"42":{"0":4},"43":{"0":4},"9":{"0":4}}`)
	c.Advance(5 * time.Second) // 43 silent for its ttl, 42 expired again
	waitBody(t, "POST", url+"/query", query, `"scores":{"9":{"0":4}}`)
	pubB.send("kv@pod@llama", 1, vllmFixture(t, "removed_map"))
	pubB.send("kv@pod@llama", 2, vllmFixture(t, "stored_map"))
	waitBody(t, "POST", url+"/query", query, `"scores":{"43":{"0":4},"9":{"0":4}}`) // renewed by its events

	hashes := event.BlockHashes([]uint32{1, 2, 3, 4}, 4, "", "")
	hj, _ := json.Marshal(hashes)
	body := `[{"worker_id":43,"block_hashes":` + string(hj) + `,"cached_tokens":4,"model_name":"llama","routing_group":"blue"},` +
		`{"worker_id":9,"block_hashes":` + string(hj) + `,"cached_tokens":0,"model_name":"llama","routing_group":"blue"}]`
	if code, b := call(t, "POST", url+"/v1/outcomes", body); code != 200 {
		t.Fatalf("outcomes: %d %s", code, b)
	}
	rows := accuracyRows(t, url+"/v1/accuracy?model_name=llama&routing_group=blue")
	if len(rows) != 1 || len(rows[0].BySource) != 2 {
		t.Fatalf("accuracy: %+v", rows)
	}
	if d, h := rows[0].BySource[0], rows[0].BySource[1]; d.Source != "dynamo" || d.Exact != 1 || h.Source != "http" || h.Over.Count != 1 {
		t.Fatalf("by source: %+v", rows[0].BySource)
	}
	_, page := call(t, "GET", url+"/", "")
	for _, want := range []string{`data-accuracy="llama:blue"`, `data-accuracy="llama:blue:dynamo"`, `data-accuracy="llama:blue:http"`,
		`data-lease="43" data-state="live"`, `live (source)`} {
		if !strings.Contains(page, want) {
			t.Fatalf("the status page lacks %s", want)
		}
	}
	_, m := call(t, "GET", url+"/metrics", "")
	if want := `kvindex_overpredictions_total{model="llama",routing_group="blue",source="http"} 1`; !strings.Contains(m, want+"\n") {
		t.Fatalf("metrics lack %q", want)
	}

	if code, body := call(t, "POST", url+"/unregister", `{"instance_id":42,"model_name":"llama"}`); code != 200 {
		t.Fatalf("unregister: %d %s", code, body)
	}
	if _, ok := leasesOf(t, url)[42]; ok {
		t.Fatal("/unregister left the instance's lease")
	}
}
