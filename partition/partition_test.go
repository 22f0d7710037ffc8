package partition

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
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
		t.Fatalf("tenant_id is ignored (docs/CONTRACT.md §9): KeyOf(llama, \"\", tenant-x) = %v, want %v", k, a.Key)
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
	if s.IndexOf(a.ID) != a.Index || s.IndexOf(0) == a.Index {
		t.Fatal("IndexOf returns the partition's own tree")
	}
}

// TestDropIsDurable checks the rules "a partition no worker belongs to can be dropped: its record
// is deleted, so a reopened set does not bring it back and Ensure may give it another block size;
// a partition held for a worker is kept until the last Unhold; a Hold of a dropped partition is
// ErrDropped; the
// default partition stays in the set, unrecorded".
func TestDropIsDurable(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewMem()
	open := func() (*Set, func()) {
		t.Helper()
		st, err := store.Open("data", store.Options{FS: fs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		lg, err := wal.Open(st, wal.Options{Durability: wal.Sync, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(lg, 16, index.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s, func() {
			if err := lg.Close(); err != nil {
				t.Error(err)
			}
			if err := st.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	s, closeSet := open()
	llama, err := s.Ensure(ctx, Key{"llama", "default"}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ensure(ctx, Default, 8); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Hold(llama.ID); err != nil {
			t.Fatal(err)
		}
	}
	s.Unhold(llama.ID)
	if ok, err := s.Drop(ctx, llama.ID); ok || err != nil {
		t.Fatalf("drop of a partition one worker is still placed in: %v %v, want kept", ok, err)
	}
	s.Unhold(llama.ID)
	for _, id := range []uint32{llama.ID, 0} {
		if ok, err := s.Drop(ctx, id); !ok || err != nil {
			t.Fatalf("drop of partition %d: %v %v", id, ok, err)
		}
	}
	if _, ok := s.Lookup(llama.Key); ok {
		t.Fatal("a dropped partition is still looked up")
	}
	if err := s.Hold(llama.ID); !errors.Is(err, ErrDropped) {
		t.Fatalf("hold of a dropped partition: %v, want ErrDropped", err)
	}
	if p, ok := s.Lookup(Default); !ok || s.Recorded(p.ID) || p.BlockSize != 16 {
		t.Fatalf("the dropped default: %+v %v recorded %v, want in the set, unrecorded, block size 16", p, ok, ok && s.Recorded(p.ID))
	}
	closeSet()

	s, closeSet = open()
	defer closeSet()
	if _, ok := s.Lookup(llama.Key); ok {
		t.Fatal("a dropped partition came back after a reopen")
	}
	if p, _ := s.Lookup(Default); s.Recorded(0) || p.BlockSize != 16 {
		t.Fatalf("the dropped default after a reopen: %+v recorded %v", p, s.Recorded(0))
	}
	again, err := s.Ensure(ctx, llama.Key, 16)
	if err != nil || again.BlockSize != 16 || again.ID == llama.ID {
		t.Fatalf("llama again with another block size: %+v %v, want a new partition of block size 16", again, err)
	}
}

// TestEnsureConcurrent: concurrent Ensures of the same keys agree on one partition per key, and
// distinct keys get distinct ids (creation is serialized outside the lookup lock).
func TestEnsureConcurrent(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open("data", store.Options{FS: vfs.NewMem(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lg, err := wal.Open(st, wal.Options{Durability: wal.Sync})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	s, err := Open(lg, 16, index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys := []Key{Default, KeyOf("a", "", ""), KeyOf("b", "", ""), KeyOf("c", "g", "")}
	got := make([][]*Partition, 8)
	var wg sync.WaitGroup
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, k := range keys {
				p, err := s.Ensure(ctx, k, 0)
				if err != nil {
					t.Error(err)
					return
				}
				got[g] = append(got[g], p)
			}
		}()
	}
	wg.Wait()
	ids := map[uint32]Key{}
	for i, k := range keys {
		p, ok := s.Lookup(k)
		if !ok || !s.Recorded(p.ID) {
			t.Fatalf("%s: %+v %v, want recorded", k, p, ok)
		}
		if other, dup := ids[p.ID]; dup {
			t.Fatalf("%s and %s share id %d", k, other, p.ID)
		}
		ids[p.ID] = k
		for g := range got {
			if got[g][i] != p {
				t.Fatalf("goroutine %d got partition %+v for %s, the set has %+v", g, got[g][i], k, p)
			}
		}
	}
}
