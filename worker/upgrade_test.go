package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/testutil"
	"github.com/kvindex/kvindex/wal"
)

// fixture is testdata/format4workers (its SOURCE.md says what each worker holds).
const fixture = "../testdata/format4workers/datadir"

// memCopy copies a data dir into fs's "data".
func memCopy(t *testing.T, fs vfs.FS, src string) { testutil.CopyDir(t, fs, src, "data") }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func open(t *testing.T, fs vfs.FS) (*store.Store, *wal.Log) {
	t.Helper()
	st, err := store.Open("data", store.Options{FS: fs, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(st, wal.Options{Logger: quiet()})
	if err != nil {
		_ = st.Close()
		t.Fatal(err)
	}
	return st, l
}

// theFixture is what testdata/format4workers's five workers are, as records (SOURCE.md; the
// lease deadlines are checked against its answers.txt by the engine's test).
func theFixture(t *testing.T, got map[uint64]Record) {
	t.Helper()
	if len(got) != 5 {
		t.Fatalf("%d workers, want 5: %+v", len(got), got)
	}
	want := map[uint64]string{
		1: `{"door":"http","lease":{"ttl_ns":31536000000000000}}`,
		2: `{"door":"http","recovery_url":"http://upstream.example:7070"}`,
		3: `{"door":"zmq","group_kinds":["full_attention","sliding_window"],"lease":{"ttl_ns":28800000000000000,"implied":true}}`,
		4: `{"partition":{"model_name":"r","routing_group":"default"},"door":"dynamo","lease":{"ttl_ns":31536000000000000},` +
			`"registrations":[{"dp_rank":0,"endpoint":"tcp://127.0.0.1:17996","block_size":32,"source_id":"dynamo-4-0"},` +
			`{"dp_rank":1,"endpoint":"tcp://127.0.0.1:17995","replay_endpoint":"tcp://127.0.0.1:17994","block_size":32,"source_id":"dynamo-4-1"}]}`,
		5: `{"lease":{"ttl_ns":600000000000}}`,
	}
	for w, r := range got {
		if r.Lease != nil {
			if r.Lease.Deadline <= 0 {
				t.Fatalf("worker %d: no lease deadline: %+v", w, r)
			}
			r.Lease = &Lease{TTL: r.Lease.TTL, Implied: r.Lease.Implied} // deadlines: the engine's test
		}
		if s := strings.Replace(string(r.Encode()), `"deadline_unix_ns":0,`, "", 1); s != want[w] {
			t.Errorf("worker %d:\n got %s\nwant %s", w, s, want[w])
		}
	}
}

// TestUpgradeFormat4 converts testdata/format4workers: five per-worker prefixes become one record
// per worker, the old entries are gone, the version is 5; read before the upgrade (Load of a
// format-4 dir) and after, the records are the same.
func TestUpgradeFormat4(t *testing.T) {
	fs := vfs.NewMem()
	memCopy(t, fs, fixture)
	st, l := open(t, fs)
	if l.Version() != store.FormatV4 {
		t.Fatalf("fixture version %d", l.Version())
	}
	before, err := Load(l)
	if err != nil {
		t.Fatal(err)
	}
	theFixture(t, before)
	srcs := func() []string {
		m, err := l.Metas(v4Source)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Sorted(maps.Keys(m))
	}
	if got, want := srcs(), []string{"zmqsource/dynamo-4-0", "zmqsource/dynamo-4-1", "zmqsource/src3"}; !slices.Equal(got, want) {
		t.Fatalf("fixture's source configs %v, want %v", got, want)
	}
	if n, err := Upgrade(l); err != nil || n != 5 {
		t.Fatalf("Upgrade: %d %v", n, err)
	}
	if l.Version() != store.FormatVersion {
		t.Fatalf("version %d after the upgrade", l.Version())
	}
	_ = st.Close()
	st, l = open(t, fs)
	defer st.Close()
	if l.Version() != store.FormatVersion {
		t.Fatalf("version %d after a reopen", l.Version())
	}
	after, err := Load(l)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("records changed by the upgrade:\nbefore %+v\nafter  %+v", before, after)
	}
	for _, p := range []string{v4URL, v4Door, v4Kinds, v4Lease, v4Register} {
		if m, err := l.Metas(p); err != nil || len(m) != 0 {
			t.Fatalf("format-4 entries %s left: %v %v", p, m, err)
		}
	}
	// The registrations' source configs go (the records hold them); the one added over HTTP stays.
	if got, want := srcs(), []string{"zmqsource/src3"}; !slices.Equal(got, want) {
		t.Fatalf("source configs after the upgrade %v, want %v", got, want)
	}
	if n, err := Upgrade(l); err != nil || n != 0 {
		t.Fatalf("Upgrade of a format-5 dir: %d %v", n, err)
	}
}

// TestUpgradeFormat4KeepsUnknownKinds checks the rule "the format-4 upgrade keeps a group kind
// name this version does not know": a format-4 dir whose groupkinds/<id> names one (written by a
// newer format-4 kvindex) is upgraded to a record that still names it.
func TestUpgradeFormat4KeepsUnknownKinds(t *testing.T) {
	fs := vfs.NewMem()
	memCopy(t, fs, fixture)
	st, l := open(t, fs)
	defer st.Close()
	b := l.NewBatch()
	b.SetMeta(v4Kinds+"6", []byte("sliding_window,future_kind,full_attention"))
	err := l.Commit(context.Background(), b)
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Upgrade(l); err != nil || n != 6 {
		t.Fatalf("Upgrade: %d %v", n, err)
	}
	recs, err := Load(l)
	if err != nil {
		t.Fatal(err)
	}
	r := recs[6]
	if want := []string{"full_attention", "sliding_window", "future_kind"}; !slices.Equal(r.GroupKinds, want) {
		t.Fatalf("worker 6's kinds after the upgrade %q, want %q", r.GroupKinds, want)
	}
	if got := r.UnknownKinds(); !slices.Equal(got, []string{"future_kind"}) {
		t.Fatalf("UnknownKinds %q", got)
	}
}

// failAfter fails every write or sync of the store's WAL from its n-th on, once armed.
type failAfter struct {
	armed atomic.Bool
	n     atomic.Int32
}

var errInjected = errors.New("injected")

func (f *failAfter) MaybeError(op errorfs.Op) error {
	if !f.armed.Load() || !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		if f.n.Add(-1) < 0 {
			return errInjected
		}
	}
	return nil
}

func (f *failAfter) String() string { return "fail the WAL after n ops" }

// TestUpgradeFormat4Crash kills the upgrade at every WAL write or sync it makes (the op fails,
// then a crash keeps only what was synced) and reopens: the dir is format 4 with its per-worker
// entries, or format 5 with the records, never a mix, and the records read the same.
func TestUpgradeFormat4Crash(t *testing.T) {
	pristine := vfs.NewMem()
	memCopy(t, pristine, fixture)
	st, l := open(t, pristine)
	want, err := Load(l)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	for n := int32(0); ; n++ {
		mem := vfs.NewCrashableMem()
		memCopy(t, mem, fixture)
		inj := &failAfter{}
		st, l := open(t, errorfs.Wrap(mem, inj))
		inj.n.Store(n)
		inj.armed.Store(true)
		_, uerr := Upgrade(l)
		crashed := mem.CrashClone(vfs.CrashCloneCfg{}) // synced data only: as after kill -9
		_ = st.Close()
		st2, l2 := open(t, crashed)
		got, err := Load(l2)
		if err != nil {
			t.Fatalf("op %d: %v", n, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("op %d (upgrade: %v): records after the crash:\n%+v\nwant %+v", n, uerr, got, want)
		}
		recs, _ := l2.Metas(MetaPrefix)
		old, _ := l2.Metas(v4Lease)
		switch v := l2.Version(); {
		case v == store.FormatV4 && len(recs) == 0 && len(old) == 4:
		case v == store.FormatVersion && len(recs) == 5 && len(old) == 0:
		default:
			t.Fatalf("op %d: format %d with %d records and %d format-4 leases: a mix", n, v, len(recs), len(old))
		}
		_ = st2.Close()
		if uerr == nil {
			if n == 0 {
				t.Fatal("the upgrade wrote nothing to the WAL")
			}
			t.Logf("the upgrade was killed at each of its %d WAL writes and syncs", n)
			return // every op of a successful upgrade was failed once
		}
		if !errors.Is(uerr, errInjected) && !errors.Is(uerr, wal.ErrFailed) {
			t.Fatalf("op %d: upgrade error %v", n, uerr)
		}
		if n > 100 {
			t.Fatal("the upgrade never succeeded")
		}
	}
}
