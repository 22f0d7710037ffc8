package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/wal"
)

// Issue 35's seam, for the ZMQ doors (a vLLM source of POST /v1/sources, and the source of a
// Dynamo /register): a worker fed into partition llama:blue is removed (DELETE
// /v1/workers/{id}, or its source-implied lease expires past its grace), and the same running
// source sends more of its events: the rank is in llama:blue again (no partition unknown-<id>),
// scores there, and a POST of the worker's events into another partition is 409.
func TestZMQWorkerPlacedAgainAfterRemoval(t *testing.T) {
	for _, door := range []string{"zmq", "dynamo"} {
		for _, removal := range []string{"delete", "lease"} {
			t.Run(door+"/"+removal, func(t *testing.T) { zmqWorkerPlacedAgain(t, door, removal) })
		}
	}
}

func zmqWorkerPlacedAgain(t *testing.T, door, removal string) {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s, url, stop := serveConfig(t, Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Durability: wal.NoSync, Lanes: 2, Now: c.Now, LeaseGrace: time.Minute, SourceLease: 10 * time.Second})
	defer func() { _ = stop() }()
	pub := startZMQPub(t)
	const worker = 43
	if door == "zmq" {
		body := fmt.Sprintf(`{"kind":"zmq","endpoint":"%s","worker_id":%d,"model_name":"llama","routing_group":"blue","block_size":4}`, pub.ep, worker)
		if code, resp := call(t, "POST", url+"/v1/sources", body); code != 200 {
			t.Fatalf("POST /v1/sources: %d %s", code, resp)
		}
	} else {
		body := fmt.Sprintf(`{"instance_id":%d,"endpoint":"%s","model_name":"llama","routing_group":"blue","block_size":4}`, worker, pub.ep)
		if code, resp := call(t, "POST", url+"/register", body); code != 201 {
			t.Fatalf("POST /register: %d %s", code, resp)
		}
	}
	pub.waitSubscribed()
	local := event.BlockHashes([]uint32{1, 2, 3, 4}, 4, "", "")[0]
	query := fmt.Sprintf(`{"block_hashes":[%d],"model_name":"llama","routing_group":"blue"}`, local)
	scored := fmt.Sprintf(`"worker_id":%d,"dp_rank":0,"score":1`, worker)
	check := func(when string) {
		t.Helper()
		waitBody(t, "POST", url+"/v1/find_matches", query, scored)
		if _, ranks := call(t, "GET", url+"/v1/ranks", ""); strings.Contains(ranks, "unknown-") || !strings.Contains(ranks, `"model_name":"llama"`) {
			t.Fatalf("%s: GET /v1/ranks: %s, want worker %d's rank in llama:blue", when, ranks, worker)
		}
		ev := eventsJSON(event.Stored(event.Rank{WorkerID: worker}, 99, nil, event.Block{BlockHash: 7, TokensHash: 7}))
		fix := fmt.Sprintf("post with ?model_name=llama&routing_group=blue, or remove the worker first (DELETE /v1/workers/%d)", worker)
		if code, body := call(t, "POST", url+"/v1/events?model_name=other", ev); code != http.StatusConflict || !strings.Contains(body, fix) {
			t.Fatalf("%s: POST /v1/events?model_name=other of worker %d: %d %s, want 409 saying %q", when, worker, code, body, fix)
		}
	}
	pub.send("kv@pod@llama", 0, vllmFixture(t, "stored_map"))
	check("first batch")

	switch removal {
	case "delete":
		if code, body := call(t, "DELETE", fmt.Sprintf("%s/v1/workers/%d", url, worker), ""); code != 200 {
			t.Fatalf("DELETE /v1/workers/%d: %d %s", worker, code, body)
		}
	case "lease":
		c.Advance(10*time.Second + time.Minute + time.Second)
		if w, _, err := s.e.SweepLeases(context.Background()); err != nil || w != 1 {
			t.Fatalf("lease sweep: %d workers removed, %v; want worker %d", w, err, worker)
		}
	}
	if _, ranks := call(t, "GET", url+"/v1/ranks", ""); strings.Contains(ranks, fmt.Sprintf(`"worker_id":%d`, worker)) {
		t.Fatalf("worker %d still listed after its removal: %s", worker, ranks)
	}

	pub.send("kv@pod@llama", 1, vllmFixture(t, "stored_map"))
	check("after the removal, fed again by the same source")
}

// TestRegisterConflictNamesTheStoredRegistration: a /register of a registered (instance_id,
// dp_rank) with another endpoint, or of a registered instance into another partition, is 409
// naming what is stored and the way out (issue 36 item 9); the same registration again is 201.
func TestRegisterConflictNamesTheStoredRegistration(t *testing.T) {
	_, url, stop := serveConfig(t, Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Durability: wal.NoSync, Lanes: 2})
	defer func() { _ = stop() }()
	pub := startZMQPub(t)
	reg := func(ep, model string) string {
		return fmt.Sprintf(`{"instance_id":5,"endpoint":"%s","model_name":"%s","block_size":4}`, ep, model)
	}
	if code, body := call(t, "POST", url+"/register", reg(pub.ep, "llama")); code != 201 {
		t.Fatalf("register: %d %s", code, body)
	}
	for _, tc := range []struct{ body, want string }{
		{reg("tcp://127.0.0.1:1", "llama"), "instance 5 dp_rank 0 already registered with endpoint " + pub.ep + ", block_size 4: " +
			"register the same settings again, or POST /unregister it first"},
		{reg(pub.ep, "qwen"), "instance 5 is already registered for model_name=llama routing_group=default (endpoint " + pub.ep +
			"); register it with that model_name and routing_group, or POST /unregister it first"},
	} {
		if code, body := call(t, "POST", url+"/register", tc.body); code != http.StatusConflict || !strings.Contains(body, tc.want) {
			t.Errorf("register %s: %d %s, want 409 saying %q", tc.body, code, body, tc.want)
		}
	}
	if code, body := call(t, "POST", url+"/register", reg(pub.ep, "llama")); code != 201 {
		t.Fatalf("the same registration again: %d %s", code, body)
	}
}

// TestDeleteWorkerEndsItsLease: DELETE /v1/workers/{id} is the engine's one Remove: the worker's
// ranks go, its lease ends (it no longer outlives the worker), and the partition it emptied is
// dropped.
func TestDeleteWorkerEndsItsLease(t *testing.T) {
	s, url, stop := serveConfig(t, Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Durability: wal.NoSync, Lanes: 2})
	defer func() { _ = stop() }()
	ev := eventsJSON(event.Stored(event.Rank{WorkerID: 3}, 1, nil, event.Block{BlockHash: 7, TokensHash: 7}))
	if code, body := call(t, "POST", url+"/v1/events?model_name=llama", ev); code != 200 {
		t.Fatalf("events: %d %s", code, body)
	}
	if code, body := call(t, "PUT", url+"/v1/workers/3/lease?model_name=llama", `{"ttl_ms":60000}`); code != 200 {
		t.Fatalf("PUT lease: %d %s", code, body)
	}
	if _, ok := leasesOf(t, url)[3]; !ok {
		t.Fatal("the lease was not taken")
	}
	if code, body := call(t, "DELETE", url+"/v1/workers/3", ""); code != 200 || !strings.Contains(body, `"removed_ranks":1`) {
		t.Fatalf("DELETE /v1/workers/3: %d %s", code, body)
	}
	if l, ok := leasesOf(t, url)[3]; ok {
		t.Fatalf("the removed worker's lease outlived it: %+v", l)
	}
	if _, ok := s.e.Partitions().Lookup(partition.KeyOf("llama", "", "")); ok {
		t.Fatal("partition llama is still there after its only worker was removed")
	}
}

// The HTTP door of issue 35's seam: a worker posted into llama is removed (DELETE, or its lease
// expires past its grace), posted into llama again: it scores there, and a post into another
// partition is 409 with the way out.
func TestHTTPWorkerPlacedAgainAfterRemoval(t *testing.T) {
	for _, removal := range []string{"delete", "lease"} {
		t.Run(removal, func(t *testing.T) {
			c := &fakeClock{}
			c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			s, url, stop := serveConfig(t, Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Durability: wal.NoSync, Lanes: 2, Now: c.Now, LeaseGrace: time.Minute})
			defer func() { _ = stop() }()
			post := func(model string, id uint64) (int, string) {
				ev := eventsJSON(event.Stored(event.Rank{WorkerID: 4}, id, nil, event.Block{BlockHash: 7, TokensHash: 70}))
				return call(t, "POST", url+"/v1/events?model_name="+model, ev)
			}
			check := func(when string) {
				t.Helper()
				waitBody(t, "POST", url+"/v1/find_matches", `{"block_hashes":[70],"model_name":"llama"}`, `"worker_id":4,"dp_rank":0,"score":1`)
				const fix = "post with ?model_name=llama, or remove the worker first (DELETE /v1/workers/4)"
				if code, body := post("other", 99); code != http.StatusConflict || !strings.Contains(body, fix) {
					t.Fatalf("%s: post of worker 4 into another partition: %d %s, want 409 saying %q", when, code, body, fix)
				}
			}
			if code, body := post("llama", 1); code != 200 {
				t.Fatalf("events: %d %s", code, body)
			}
			check("first post")
			switch removal {
			case "delete":
				if code, body := call(t, "DELETE", url+"/v1/workers/4", ""); code != 200 {
					t.Fatalf("DELETE: %d %s", code, body)
				}
			case "lease":
				if code, body := call(t, "PUT", url+"/v1/workers/4/lease", `{"ttl_ms":1000}`); code != 200 {
					t.Fatalf("PUT lease: %d %s", code, body)
				}
				c.Advance(time.Second + time.Minute + time.Second)
				if w, _, err := s.e.SweepLeases(context.Background()); err != nil || w != 1 {
					t.Fatalf("lease sweep: %d workers removed, %v", w, err)
				}
			}
			if _, ok := s.e.Partitions().Lookup(partition.KeyOf("llama", "", "")); ok {
				t.Fatal("partition llama is still there after its only worker was removed")
			}
			if code, body := post("llama", 2); code != 200 {
				t.Fatalf("events after the removal: %d %s", code, body)
			}
			check("posted again after the removal")
		})
	}
}
