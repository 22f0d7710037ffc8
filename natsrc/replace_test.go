package natsrc_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/natsrc"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/server"
	"github.com/nats-io/nats.go"
)

// coreSourceID waits for the replica's one Core source to subscribe and returns its id.
func (r *replica) coreSourceID() string {
	r.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, _, b := r.get("/v1/sources")
		if i := strings.Index(string(b), `"id":"nats-`); i >= 0 {
			id := string(b[i+6 : i+6+len("nats-")+16])
			if r.source(id).State == natsrc.StateConnected {
				return id
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the nats source never subscribed: %s", b)
		}
	}
}

// clock is a settable clock for the engine's leases.
type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func (r *replica) del(path string) (int, string) {
	r.t.Helper()
	req, _ := http.NewRequest("DELETE", r.hs.URL+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The bug of issue 35: a running NATS source into partition m feeds worker 1; the worker is
// removed (DELETE /v1/workers/1, or its source-implied lease expires past its grace and the
// sweep drops the emptied partition m); the same source then publishes more of worker 1's
// events. The rank must land in partition m again (not a partition "unknown-<id>" nobody made),
// index the source's group kinds again (its sliding-window removal lowers the score: 2, not
// the server's default 3), score in find_matches?model_name=m, and a POST of worker 1's events
// into another partition is refused (409).
func TestNATSWorkerPlacedAgainAfterRemoval(t *testing.T) {
	for _, kind := range []string{natsrc.KindJetStream, natsrc.KindCore} {
		for _, removal := range []string{"delete", "lease"} {
			t.Run(kind+"/"+removal, func(t *testing.T) { natsWorkerPlacedAgain(t, kind, removal) })
		}
	}
}

func natsWorkerPlacedAgain(t *testing.T, kind, removal string) {
	ns := startNATS(t, t.TempDir(), 0)
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	const extra = "&model_name=m&indexed_group_kinds=full_attention+sliding_window"
	const subject = "kv-events-of-m"
	var cfg server.Config
	if kind == natsrc.KindJetStream {
		cfg = jsFlag(ns.ClientURL(), "a", "&create=true"+extra)
	} else {
		cfg = server.Config{NATS: []string{ns.ClientURL() + "?subject=" + subject + extra}}
	}
	cfg.Now, cfg.SourceLease, cfg.LeaseGrace = c.Now, 10*time.Second, time.Minute
	r := openReplica(t, nil, cfg)
	var send func(evs []event.RouterEvent)
	if kind == natsrc.KindJetStream {
		_, js, _ := jsClient(t, ns.ClientURL(), stream)
		send = func(evs []event.RouterEvent) { r.waitSeq(sourceID, publish(t, js, stream, evs), 15*time.Second) }
	} else {
		id := r.coreSourceID()
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		seq := uint64(0)
		send = func(evs []event.RouterEvent) {
			for _, ev := range evs {
				seq++
				if err := nc.Publish(subject, envelopeOf(t, 55, seq, ev)); err != nil {
					t.Fatal(err)
				}
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); r.source(id).Messages < seq; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("core source: %+v, want %d messages", r.source(id), seq)
				}
			}
		}
	}
	rk := event.Rank{WorkerID: 1}
	grouped := func(ev event.RouterEvent, idx uint32, kind event.GroupKind) event.RouterEvent {
		ev.HasGroup, ev.Group = true, event.Group{Idx: idx, Kind: kind, BlockSize: 16}
		return ev
	}
	feed := func(first uint64) {
		t.Helper()
		blocks := []event.Block{{BlockHash: 100, TokensHash: 10}, {BlockHash: 200, TokensHash: 20}, {BlockHash: 300, TokensHash: 30}}
		send([]event.RouterEvent{
			grouped(event.Stored(rk, first, nil, blocks...), 0, event.GroupKindFullAttention),
			grouped(event.Stored(rk, first+1, nil, blocks...), 1, event.GroupKindSlidingWindow),
			grouped(event.Removed(rk, first+2, 300), 1, event.GroupKindSlidingWindow),
		})
	}
	check := func(when string) {
		t.Helper()
		// A Core source counts a message before its events are applied: wait for the score.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			_, body := r.post("/v1/find_matches?model_name=m", `{"block_hashes":[10,20,30]}`)
			if strings.Contains(string(body), `"worker_id":1,"dp_rank":0,"score":2`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: find_matches?model_name=m: %s, want worker 1 scored 2", when, body)
			}
		}
		_, _, ranks := r.get("/v1/ranks")
		if strings.Contains(string(ranks), "unknown-") || !strings.Contains(string(ranks), `"model_name":"m"`) {
			t.Fatalf("%s: GET /v1/ranks: %s, want worker 1's rank in partition m", when, ranks)
		}
		other := event.Stored(rk, 99, nil, event.Block{BlockHash: 7, TokensHash: 7})
		ev := string(event.AppendJSON([]byte("["), &other)) + "]"
		const fix = "post with ?model_name=m, or remove the worker first (DELETE /v1/workers/1)"
		if code, body := r.post("/v1/events?model_name=other", ev); code != http.StatusConflict || !strings.Contains(string(body), fix) {
			t.Fatalf("%s: POST /v1/events?model_name=other of worker 1: %d %s, want 409 saying %q", when, code, body, fix)
		}
	}
	feed(1)
	check("first feed")

	switch removal {
	case "delete":
		if code, body := r.del("/v1/workers/1"); code != 200 {
			t.Fatalf("DELETE /v1/workers/1: %d %s", code, body)
		}
	case "lease":
		c.Advance(10*time.Second + time.Minute + time.Second)
		if w, _, err := r.srv.Engine().SweepLeases(context.Background()); err != nil || w != 1 {
			t.Fatalf("lease sweep: %d workers removed, %v; want worker 1", w, err)
		}
	}
	if _, ok := r.srv.Engine().Partitions().Lookup(partition.KeyOf("m", "", "")); ok {
		t.Fatal("partition m is still there after its only worker was removed")
	}
	if _, _, ranks := r.get("/v1/ranks"); strings.Contains(string(ranks), `"worker_id":1`) {
		t.Fatalf("worker 1 still listed after its removal: %s", ranks)
	}

	feed(4)
	check("after the removal, fed again by the same source")
}
