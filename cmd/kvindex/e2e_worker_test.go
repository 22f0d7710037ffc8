package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
)

// TestE2EWorkerPlacedAgainAfterRemovalAndKill9 is issue 35's bug over HTTP, on the real binary:
// a worker's events in a non-default partition, the worker removed (DELETE /v1/workers/N, or its
// lease expiring past --lease-grace), more events of the same worker by the same door, kill -9
// and restart. The worker must then be in the partition its door names (never an invented
// "unknown-N"), score there and nowhere else, and a post naming another partition must be
// refused with 409.
func TestE2EWorkerPlacedAgainAfterRemovalAndKill9(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		remove func(t *testing.T, p *proc)
	}{
		{"delete", nil, func(t *testing.T, p *proc) {
			code, b := p.do("DELETE", "/v1/workers/3", "", nil)
			if code != 200 || string(bytes.TrimSpace(b)) != `{"removed_ranks":1}` {
				t.Fatalf("DELETE /v1/workers/3: %d %s", code, b)
			}
		}},
		{"lease-expiry", []string{"--lease-grace", "1ms"}, func(t *testing.T, p *proc) {
			code, b := p.do("PUT", "/v1/workers/3/lease?model_name=m", "application/json", []byte(`{"ttl_ms":200}`))
			if code != 200 {
				t.Fatalf("PUT /v1/workers/3/lease: %d %s", code, b)
			}
			// The sweep removes the worker once its deadline and the grace have passed.
			for deadline := time.Now().Add(20 * time.Second); ; {
				if _, ok := p.rankOf(event.Rank{WorkerID: 3}); !ok {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("worker 3 still listed 20 s after its lease of 200 ms: %+v", p.ranks())
				}
				time.Sleep(50 * time.Millisecond)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { workerPlacedAgain(t, tc.args, tc.remove) })
	}
}

func workerPlacedAgain(t *testing.T, args []string, remove func(t *testing.T, p *proc)) {
	dir := t.TempDir()
	p := start(t, dir, args...)
	p.waitReady()
	const part = "?model_name=m"
	w := event.Rank{WorkerID: 3}
	other := event.Rank{WorkerID: 4} // in partition n, the one worker 3 is refused from
	g := newChainGen(w, 0)
	for range 4 {
		p.mustPost("/v1/events"+part, jsonEvents(g.next(3)...))
	}
	p.mustPost("/v1/events?model_name=n", jsonEvents(rootStored(other, 1, 500)))

	remove(t, p)
	if _, ok := p.rankOf(w); ok {
		t.Fatalf("worker 3 still listed after its removal: %+v", p.ranks())
	}

	// The same door goes on: a new chain (the removal forgot the old one), ids going on.
	g.chain = g.chain[:0]
	for range 3 {
		p.mustPost("/v1/events"+part, jsonEvents(g.next(3)...))
	}
	query := func() []uint64 {
		q := make([]uint64, len(g.chain))
		for i, h := range g.chain {
			q[i] = h % 1000
		}
		return q
	}()
	check := func(p *proc, when string) {
		t.Helper()
		p.mustPost("/v1/flush", "")
		workerOnlyIn(t, p, when, w, func(r rankRow) bool { return r.DPRank == 0 && r.LastEventID == g.id }, query,
			event.Stored(w, g.id+100, nil, event.Block{BlockHash: 999_999, TokensHash: 999}))
	}
	check(p, "before kill -9")

	p.kill()
	p = start(t, dir, args...)
	p.waitReady()
	check(p, "after kill -9")
	if rows := p.ranks(); len(rows) != 2 {
		t.Fatalf("after kill -9: ranks %+v, want worker 3 in m and worker 4 in n", rows)
	}
}

// workerOnlyIn checks worker w (worker 3) on the running server p, as issue 35 asks after its
// removal and placement again: one rank, in partition m (never an invented "unknown-N"), the row
// as rowOK wants; query scores all of its blocks there and nothing in the default partition; a
// post of next to partition n is refused with 409 naming m, and the worker is still listed.
func workerOnlyIn(t *testing.T, p *proc, when string, w event.Rank, rowOK func(rankRow) bool, query []uint64, next event.RouterEvent) {
	t.Helper()
	rows := p.ranks()
	var got []rankRow
	for _, r := range rows {
		if strings.HasPrefix(r.ModelName, "unknown-") {
			t.Fatalf("%s: a partition nobody made: %+v", when, rows)
		}
		if r.WorkerID == w.WorkerID {
			got = append(got, r)
		}
	}
	if len(got) != 1 || got[0].ModelName != "m" || !rowOK(got[0]) {
		t.Fatalf("%s: worker %d's ranks %+v, want one rank in m as the test says (all: %+v)", when, w.WorkerID, got, rows)
	}
	p.part = "?model_name=m"
	sc := p.scores(query)
	p.part = ""
	if len(sc) != 1 || sc[0].WorkerID != w.WorkerID || sc[0].Score != uint32(len(query)) {
		t.Fatalf("%s: find_matches?model_name=m for worker %d's chain of %d: %+v", when, w.WorkerID, len(query), sc)
	}
	if sc := p.scores(query); len(sc) != 0 {
		t.Fatalf("%s: worker %d scores in the default partition: %+v", when, w.WorkerID, sc)
	}
	// Another partition: refused, nothing written, the worker still only in m.
	code, b := p.post("/v1/events?model_name=n", jsonEvents(next))
	var body struct{ Error string }
	if err := json.Unmarshal(b, &body); code != 409 || err != nil ||
		!strings.Contains(body.Error, fmt.Sprintf("worker %d has ranks in partition model_name=m routing_group=default", w.WorkerID)) {
		t.Fatalf("%s: a post of worker %d to partition n: %d %s, want 409 naming partition m", when, w.WorkerID, code, b)
	}
	if _, ok := p.rankOf(w); !ok {
		t.Fatalf("%s: worker %d gone after the refused post", when, w.WorkerID)
	}
}
