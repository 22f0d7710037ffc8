package main

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
)

// pushBoth posts a batch to every server given (the workers publish to both indexes).
func pushBoth(t *testing.T, evs []event.RouterEvent, ps ...*proc) {
	t.Helper()
	for _, p := range ps {
		p.mustPost("/v1/events"+p.part, jsonEvents(evs...))
	}
}

// waitConverged polls until b's ranks report the same last ids as a's with state live, or fails.
func waitConverged(t *testing.T, a, b *proc, wantState string) []rankRow {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ra, rb := a.ranks(), b.ranks()
		same := len(ra) == len(rb)
		for i := 0; same && i < len(ra); i++ {
			same = ra[i].WorkerID == rb[i].WorkerID && ra[i].DPRank == rb[i].DPRank && ra[i].LastEventID == rb[i].LastEventID &&
				rb[i].State == wantState && ra[i].Blocks == rb[i].Blocks
		}
		if same {
			return rb
		}
		if time.Now().After(deadline) {
			t.Fatalf("b did not converge to a:\na %+v\nb %+v\nb logs:\n%s", ra, rb, b.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sameScores(t *testing.T, a, b *proc, queries [][]uint64) {
	t.Helper()
	for _, q := range queries {
		sa, sb := a.scores(q), b.scores(q)
		if !reflect.DeepEqual(sa, sb) {
			t.Fatalf("query %v: a %+v, b %+v", q, sa, sb)
		}
	}
}

func recoveryQueries(gens []*chainGen) [][]uint64 {
	var qs [][]uint64
	for i := 0; i < 1000; i += 7 {
		qs = append(qs, []uint64{uint64(i), uint64(i + 1), uint64(i + 2)})
	}
	for _, g := range gens {
		q := make([]uint64, 0, len(g.chain))
		for _, h := range g.chain {
			q = append(q, h%1000)
		}
		qs = append(qs, q)
	}
	return qs
}

// TestTwoProcessRecovery: A sits beside the workers, B (--upstream A) follows. B is killed, the
// workers keep publishing to A only, B restarts; the next live events reveal the gaps and B
// recovers them from A: it ends with A's answers and its ledger says recovered. Variants: A's
// log folded past B's cursor (→ TreeDump), and A unreachable (→ lost, degraded, still serving).
// Seam: recovery in a non-default partition (the "llama" variants): B's fetches name the rank's
// partition and keep it, the restored ranks stay in their partition.
func TestTwoProcessRecovery(t *testing.T) {
	for _, tc := range []struct{ variant, model string }{
		{"events", ""}, {"treedump", ""}, {"unreachable", ""}, {"events", "llama"}, {"treedump", "llama"},
	} {
		variant, part := tc.variant, ""
		name := variant
		if tc.model != "" {
			part, name = "?model_name="+tc.model, variant+"/"+tc.model
		}
		t.Run(name, func(t *testing.T) {
			argsA := []string{}
			if variant == "treedump" {
				argsA = append(argsA, "--retain-events", "5")
			}
			a := start(t, t.TempDir(), argsA...)
			a.part = part
			a.waitReady()
			dirB := t.TempDir()
			b := start(t, dirB, "--upstream", a.base, "--fetch-timeout", "2s")
			b.part = part
			b.waitReady()
			rng := rand.New(rand.NewPCG(uint64(len(variant)), 9))
			gens := []*chainGen{
				newChainGen(event.Rank{WorkerID: 1}, 0),
				newChainGen(event.Rank{WorkerID: 1, DPRank: 1}, 1_000_000),
				newChainGen(event.Rank{WorkerID: 2}, 2_000_000),
			}
			for range 10 {
				for _, g := range gens {
					pushBoth(t, g.next(1+rng.IntN(3)), a, b)
				}
			}
			waitConverged(t, a, b, "live")
			sameScores(t, a, b, recoveryQueries(gens))

			b.kill()
			for range 15 { // B misses these
				for _, g := range gens {
					pushBoth(t, g.next(1+rng.IntN(3)), a)
				}
			}
			if variant == "unreachable" {
				a.kill()
			}
			b = start(t, dirB, "--upstream", a.base, "--fetch-timeout", "500ms", "--fetch-backoff", "10ms")
			b.part = part
			b.waitReady()
			if variant == "unreachable" {
				// The next live events reveal the gaps; the upstream is gone: lost, degraded,
				// B keeps serving what it was told.
				for _, g := range gens {
					b.mustPost("/v1/events", jsonEvents(g.next(1)...))
				}
				deadline := time.Now().Add(60 * time.Second)
				for {
					rows := b.ranks()
					done := len(rows) == len(gens)
					for _, r := range rows {
						done = done && r.State == "degraded" && r.Gaps.Lost >= 1
					}
					if done {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("ranks never degraded: %+v\n%s", rows, b.logs())
					}
					time.Sleep(100 * time.Millisecond)
				}
				if code, _ := b.post("/v1/find_matches", `{"block_hashes":[1,2,3]}`); code != 200 {
					t.Fatalf("b stopped serving: %d", code)
				}
				return
			}
			for _, g := range gens {
				pushBoth(t, g.next(1), a, b)
			}
			rows := waitConverged(t, a, b, "live")
			for _, r := range rows {
				if r.Gaps.Recovered < 1 || r.Gaps.Lost != 0 {
					t.Fatalf("ledger after recovery: %+v", r)
				}
			}
			sameScores(t, a, b, recoveryQueries(gens))
			if variant == "treedump" {
				code, body := a.do("GET", "/v1/ranks/1/0/events?start=1", "", nil)
				if code != 200 || !strings.Contains(string(body), "TreeDump") {
					t.Fatalf("A's folded log should answer a TreeDump: %d %s", code, body)
				}
			}
			// B's recovered state is durable: restart B again, same answers.
			b.kill()
			b = start(t, dirB, "--upstream", a.base)
			b.part = part
			b.waitReady()
			sameScores(t, a, b, recoveryQueries(gens))
			if tc.model != "" {
				for _, r := range b.ranks() {
					if r.ModelName != tc.model {
						t.Fatalf("rank %d/%d restored into model %q, want %q", r.WorkerID, r.DPRank, r.ModelName, tc.model)
					}
				}
			}
		})
	}
}
