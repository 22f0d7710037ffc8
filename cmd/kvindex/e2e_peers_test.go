package main

import (
	"testing"

	"github.com/kvindex/kvindex/event"
)

// TestE2EPeerBootstrapPlacesWorkersAgainAfterRemovalAndKill9 is issue 35's worker seam through
// the peer door, on two real binaries: B bootstraps worker 3 (partition m) and worker 4
// (partition n) from A; DELETE /v1/workers/3 on B drops m; B restarts and its bootstrap fills
// the emptied m from A again; then kill -9 and restart. Each time worker 3 is in m (never an
// invented "unknown-3"), scores there and nowhere else, and a post of it to n is 409.
func TestE2EPeerBootstrapPlacesWorkersAgainAfterRemovalAndKill9(t *testing.T) {
	a := start(t, t.TempDir())
	a.waitReady()
	w := event.Rank{WorkerID: 3}
	chain := []event.Block{{BlockHash: 301, TokensHash: 31}, {BlockHash: 302, TokensHash: 32}, {BlockHash: 303, TokensHash: 33}}
	a.mustPost("/v1/events?model_name=m", jsonEvents(event.Stored(w, 1, nil, chain...)))
	a.mustPost("/v1/events?model_name=n", jsonEvents(rootStored(event.Rank{WorkerID: 4}, 1, 500)))
	query := []uint64{31, 32, 33}

	dirB := t.TempDir()
	peers := []string{"--peers", a.base}
	check := func(b *proc, when string) {
		t.Helper()
		workerOnlyIn(t, b, when, w, func(r rankRow) bool { return r.Blocks == 3 }, query, rootStored(w, 100, 900))
	}

	b := start(t, dirB, peers...)
	b.waitReady()
	check(b, "after the bootstrap")

	if code, body := b.do("DELETE", "/v1/workers/3", "", nil); code != 200 {
		t.Fatalf("DELETE /v1/workers/3 on B: %d %s", code, body)
	}
	if _, ok := b.rankOf(w); ok {
		t.Fatalf("worker 3 still listed on B after DELETE: %+v", b.ranks())
	}
	b.kill()
	b = start(t, dirB, peers...)
	b.waitReady()
	check(b, "after a restart that bootstrapped the emptied partition again")

	b.kill()
	b = start(t, dirB, peers...)
	b.waitReady()
	check(b, "after kill -9")
}
