package index

import (
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// TestLookupAgainstMap drives a lookup and a Go map with the same puts and deletes over a small
// key space (0 included, many collisions in a small table) and checks every get, len and the
// iteration after each step. A key is put either with a node created under it (the table) or
// with one of a few shared nodes created under other hashes (the other map), and a key moves
// between the two. Now and then the table is reserved for more entries (reserve, the restart
// replay's pre-sizing), which must keep every entry.
func TestLookupAgainstMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		st := new(slab[node])
		st.fresh() // the root: in no lookup
		m := newLookup(st, rapid.IntRange(0, 20).Draw(rt, "capacity"))
		want := map[uint64]nref{}
		shared := []nref{testNode(st, 1000), testNode(st, 1001), testNode(st, 7)}
		key := rapid.Uint64Range(0, 60)
		for range rapid.IntRange(1, 300).Draw(rt, "steps") {
			k := key.Draw(rt, "key")
			if rapid.IntRange(0, 9).Draw(rt, "reserve") == 0 {
				m.reserve(rapid.IntRange(0, 80).Draw(rt, "room"))
			}
			if rapid.IntRange(0, 2).Draw(rt, "op") > 0 {
				n := testNode(st, k)
				if rapid.Bool().Draw(rt, "shared") {
					n = rapid.SampledFrom(shared).Draw(rt, "node")
				}
				m.put(k, n)
				want[k] = n
			} else {
				got, ok := m.del(k)
				w, wok := want[k]
				if ok != wok || got != w {
					rt.Fatalf("del(%d) = %v,%v; want %v,%v", k, got, ok, w, wok)
				}
				delete(want, k)
			}
			if m.len() != len(want) {
				rt.Fatalf("len %d, want %d", m.len(), len(want))
			}
			for q := uint64(0); q <= 60; q++ {
				got, ok := m.get(q)
				w, wok := want[q]
				if ok != wok || got != w {
					rt.Fatalf("get(%d) = %v,%v; want %v,%v", q, got, ok, w, wok)
				}
			}
		}
		seen := map[uint64]bool{}
		for k, n := range m.all() {
			if seen[k] || want[k] != n {
				rt.Fatalf("iteration yields %d→%v (seen %v), want %v", k, n, seen[k], want[k])
			}
			seen[k] = true
		}
		if len(seen) != len(want) {
			rt.Fatalf("iteration yields %d entries, want %d", len(seen), len(want))
		}
	})
}

// TestLookupLongRun fills a fixed-size table with 300 keys of one home slot, so that the run's
// later entries sit further than a tag's displacement can say (255), then deletes them in
// random order, checking every key after each deletion.
func TestLookupLongRun(t *testing.T) {
	st := new(slab[node])
	st.fresh()
	m := newLookup(st, 400)
	size := len(m.tags)
	var keys []uint64
	for k := uint64(1); len(keys) < 300; k++ {
		if h, _ := slotOf(k, size); h == size-10 { // the run wraps around the end
			keys = append(keys, k)
		}
	}
	want := map[uint64]nref{}
	for _, k := range keys {
		n := testNode(st, k)
		m.put(k, n)
		want[k] = n
	}
	if len(m.tags) != size {
		t.Fatalf("table grew from %d to %d slots", size, len(m.tags))
	}
	if d := m.tags[(size-10+299)%size] >> 8; d != maxDisp {
		t.Fatalf("the run's last entry has displacement %d, want %d (capped)", d, maxDisp)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for i, k := range keys {
		if n, ok := m.del(k); !ok || n != want[k] {
			t.Fatalf("del(%d) = %v,%v; want %v", k, n, ok, want[k])
		}
		delete(want, k)
		for _, q := range keys[i:] {
			if n, ok := m.get(q); ok != (want[q] != 0) || n != want[q] {
				t.Fatalf("after %d deletions, get(%d) = %v,%v; want %v", i+1, q, n, ok, want[q])
			}
		}
	}
	if m.len() != 0 {
		t.Fatalf("len %d after deleting every key", m.len())
	}
}

// testNode returns a fresh node of st created under block hash hash.
func testNode(st *slab[node], hash uint64) nref {
	i := st.fresh()
	st.at(i).hash = hash
	return i
}
