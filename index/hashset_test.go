package index

import (
	"testing"

	"pgregory.net/rapid"
)

// TestHashSetAgainstMap drives a hashSet and a Go map with the same adds and deletes over a
// small key space (0 included, so runs collide and wrap) and checks every key, len and the
// results of add and del after each step.
func TestHashSetAgainstMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var s hashSet
		want := map[uint64]bool{}
		key := rapid.Uint64Range(0, 40)
		for range rapid.IntRange(1, 300).Draw(rt, "steps") {
			k := key.Draw(rt, "key")
			if rapid.Bool().Draw(rt, "add") {
				if got := s.add(k); got != !want[k] {
					rt.Fatalf("add(%d) = %v with %v", k, got, want)
				}
				want[k] = true
			} else {
				if got := s.del(k); got != want[k] {
					rt.Fatalf("del(%d) = %v with %v", k, got, want)
				}
				delete(want, k)
			}
			if s.len() != len(want) {
				rt.Fatalf("len %d, want %d", s.len(), len(want))
			}
			if 5*s.n > 4*s.cap() {
				rt.Fatalf("%d keys in %d slots: over 4/5 full", s.n, s.cap())
			}
			for q := uint64(0); q <= 40; q++ {
				if s.has(q) != want[q] {
					rt.Fatalf("has(%d) = %v, want %v", q, s.has(q), want[q])
				}
			}
		}
	})
}
