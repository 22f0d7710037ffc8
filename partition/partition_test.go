package partition

import (
	"context"
	"errors"
	"testing"

	"github.com/kvindex/kvindex/index"
)

// TestSetRules checks the package invariants: ids count up from 1 after the default (0), a
// block size is fixed at creation, a worker belongs to one partition until released, and
// lookups create nothing.
func TestSetRules(t *testing.T) {
	ctx := context.Background()
	s, err := Open(nil, 16, index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup(Key{"m", "g"}); ok {
		t.Fatal("lookup of an unknown partition found one")
	}
	if len(s.All()) != 1 || s.All()[0].ID != 0 || s.All()[0].Key != Default {
		t.Fatalf("a new set has the default partition only: %+v", s.All())
	}
	a, err := s.Ensure(ctx, KeyOf("llama", "", ""), 0)
	if err != nil || a.ID != 1 || a.BlockSize != 16 {
		t.Fatalf("first partition: %+v %v", a, err)
	}
	if k := KeyOf("llama", "", "tenant-x"); k != a.Key {
		t.Fatalf("tenant_id is ignored (SPEC §9): KeyOf(llama, \"\", tenant-x) = %v, want %v", k, a.Key)
	}
	b, err := s.Ensure(ctx, KeyOf("llama", "group-x", ""), 32)
	if err != nil || b.ID != 2 || b.BlockSize != 32 || b.Key.RoutingGroup != "group-x" {
		t.Fatalf("a routing group: %+v %v", b, err)
	}
	if _, err := s.Ensure(ctx, b.Key, 64); !errors.Is(err, ErrBlockSizeMismatch) {
		t.Fatalf("block size mismatch: %v", err)
	}
	if again, err := s.Ensure(ctx, b.Key, 0); err != nil || again != b {
		t.Fatalf("ensure of an existing partition: %+v %v", again, err)
	}
	if _, err := s.Ensure(ctx, Key{"", "x"}, 0); !errors.Is(err, ErrBadName) {
		t.Fatalf("empty model name: %v", err)
	}
	if err := s.Claim(7, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Claim(7, a.ID); err != nil {
		t.Fatalf("claiming again in the same partition: %v", err)
	}
	if err := s.Claim(7, b.ID); !errors.Is(err, ErrWorkerElsewhere) {
		t.Fatalf("claim in another partition: %v", err)
	}
	s.Release(7)
	if err := s.Claim(7, b.ID); err != nil {
		t.Fatalf("claim after release: %v", err)
	}
	if s.IndexOf(a.ID) != a.Index || s.IndexOf(0) == a.Index {
		t.Fatal("IndexOf returns the partition's own tree")
	}
}
