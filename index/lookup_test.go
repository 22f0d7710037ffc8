package index

import (
	"testing"

	"pgregory.net/rapid"
)

// TestLookupAgainstMap drives a lookup and a Go map with the same puts and deletes over a small
// key space (0 included, many collisions in a small table) and checks every get, len and the
// iteration after each step.
func TestLookupAgainstMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := newLookup(rapid.IntRange(0, 20).Draw(rt, "capacity"))
		want := map[uint64]*node{}
		nodes := []*node{{tokens: 1}, {tokens: 2}, {tokens: 3}}
		key := rapid.Uint64Range(0, 60)
		for range rapid.IntRange(1, 300).Draw(rt, "steps") {
			k := key.Draw(rt, "key")
			if rapid.IntRange(0, 2).Draw(rt, "op") > 0 {
				n := rapid.SampledFrom(nodes).Draw(rt, "node")
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
