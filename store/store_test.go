package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	cerrors "github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"pgregory.net/rapid"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openMem(t *testing.T, fs vfs.FS, opts Options) (*Store, error) {
	t.Helper()
	opts.FS = fs
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	opts.MemTableSize = 4 << 20
	opts.CacheSize = 4 << 20
	return Open("data", opts)
}

func mustOpen(t *testing.T, fs vfs.FS, opts Options) *Store {
	t.Helper()
	s, err := openMem(t, fs, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func TestOpenInitialisesVersion(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, fs, Options{})
	if s.Version() != FormatVersion {
		t.Fatalf("version %d, want %d", s.Version(), FormatVersion)
	}
	v, closer, err := s.DB().Get([]byte(VersionKey))
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.BigEndian.Uint32(v); got != FormatVersion {
		t.Fatalf("stored version %d", got)
	}
	closer.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Read-only reopen sees the same dir.
	ro := mustOpen(t, fs, Options{ReadOnly: true})
	if ro.Version() != FormatVersion || !ro.ReadOnly() {
		t.Fatalf("read-only reopen: version %d ro %v", ro.Version(), ro.ReadOnly())
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestFormatVersionChecks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(db *pebble.DB) error
		wantErr error
		wantMsg []string
	}{
		{
			name: "newer",
			mutate: func(db *pebble.DB) error {
				return db.Set([]byte(VersionKey), binary.BigEndian.AppendUint32(nil, FormatVersion+1), pebble.Sync)
			},
			wantErr: ErrFormatTooNew,
			wantMsg: []string{fmt.Sprintf("dir format %d", FormatVersion+1), fmt.Sprintf("up to %d", FormatVersion)},
		},
		{
			name: "older unknown",
			mutate: func(db *pebble.DB) error {
				return db.Set([]byte(VersionKey), binary.BigEndian.AppendUint32(nil, 0), pebble.Sync)
			},
			wantErr: ErrFormatUnsupported,
			wantMsg: []string{"dir format 0"},
		},
		{
			name: "malformed",
			mutate: func(db *pebble.DB) error {
				return db.Set([]byte(VersionKey), []byte{1}, pebble.Sync)
			},
			wantErr: ErrFormatUnsupported,
			wantMsg: []string{"version record has 1 bytes"},
		},
		{
			name: "data without version",
			mutate: func(db *pebble.DB) error {
				if err := db.Delete([]byte(VersionKey), pebble.Sync); err != nil {
					return err
				}
				return db.Set(LogKey(event.Rank{WorkerID: 1}, 1), []byte("x"), pebble.Sync)
			},
			wantErr: ErrFormatUnsupported,
			wantMsg: []string{"no format version record"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			s := mustOpen(t, fs, Options{})
			if err := tc.mutate(s.DB()); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			for _, ro := range []bool{false, true} {
				_, err := openMem(t, fs, Options{ReadOnly: ro})
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("readonly=%v: err %v, want %v", ro, err, tc.wantErr)
				}
				for _, m := range tc.wantMsg {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("readonly=%v: error %q lacks %q", ro, err, m)
					}
				}
			}
			// The failed opens released the lock: a correct dir would open again.
			if _, err := fs.Lock("data/" + LockFileName); err != nil {
				t.Fatalf("lock still held after failed open: %v", err)
			}
		})
	}
}

func TestReadOnlyEmptyDir(t *testing.T) {
	fs := vfs.NewMem()
	if _, err := openMem(t, fs, Options{ReadOnly: true}); !errors.Is(err, ErrNoData) {
		t.Fatalf("missing dir: %v, want ErrNoData", err)
	}
	if err := fs.MkdirAll("data", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := openMem(t, fs, Options{ReadOnly: true}); err == nil {
		t.Fatal("read-only open of an empty dir succeeded")
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   func(t *testing.T) (vfs.FS, string)
	}{
		{"mem", func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), "data" }},
		{"disk", func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := tc.fs(t)
			opts := Options{FS: fs, Logger: quietLogger(), MemTableSize: 4 << 20}
			s, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, ro := range []bool{false, true} {
				o := opts
				o.ReadOnly = ro
				_, err := Open(dir, o)
				if !errors.Is(err, ErrLocked) {
					t.Fatalf("readonly=%v: second open: %v, want ErrLocked", ro, err)
				}
				want := fmt.Sprintf("data dir %s is in use by another kvindex process (pid %d?)", dir, os.Getpid())
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("message %q lacks %q", err, want)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2, err := Open(dir, opts)
			if err != nil {
				t.Fatalf("open after close: %v", err)
			}
			if err := s2.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A byte flipped in the middle of a synced WAL is corruption, not a torn tail: Open must fail
// with ErrCorruption.
func TestWALCorruptionIsReported(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := mustOpen(t, fs, Options{})
	val := bytes.Repeat([]byte("v"), 1000)
	for i := range 200 {
		if err := s.DB().Set(LogKey(event.Rank{WorkerID: 1}, uint64(i)), val, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	_ = s.Close()

	names, err := crashed.List("data")
	if err != nil {
		t.Fatal(err)
	}
	var walName string
	for _, n := range names {
		if strings.HasSuffix(n, ".log") && n > walName {
			walName = n // the newest WAL: the one the writes went to
		}
	}
	if walName == "" {
		t.Fatalf("no WAL in %v", names)
	}
	f, err := crashed.OpenReadWrite("data/"+walName, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xde, 0xad, 0xbe, 0xef}, 50_000); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	_, err = openMem(t, crashed, Options{})
	if !errors.Is(err, ErrCorruption) {
		t.Fatalf("open of a corrupt WAL: %v, want ErrCorruption", err)
	}
}

// A WAL cut inside its last record is a torn tail: Open succeeds without that record and the
// listener hears about it.
func TestTornWALTailIsReported(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := mustOpen(t, fs, Options{})
	val := bytes.Repeat([]byte("v"), 1000)
	const n = 50
	for i := range n {
		if err := s.DB().Set(LogKey(event.Rank{WorkerID: 1}, uint64(i)), val, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	_ = s.Close()
	names, err := crashed.List("data")
	if err != nil {
		t.Fatal(err)
	}
	var walName string
	for _, n := range names {
		if strings.HasSuffix(n, ".log") && n > walName {
			walName = n
		}
	}
	path := "data/" + walName
	f, err := crashed.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	w, err := crashed.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data[:len(data)-100]); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()

	var torn []TornTail
	var logged bytes.Buffer // what an operator reads at the default level
	s2, err := openMem(t, crashed, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil)),
		Listener: Listener{TornWALTail: func(tt TornTail) { torn = append(torn, tt) }}})
	if err != nil {
		t.Fatalf("open with a torn tail: %v", err)
	}
	defer s2.Close()
	if len(torn) != 1 || torn[0].WAL != path || len(s2.TornTails()) != 1 {
		t.Fatalf("torn tails reported: %+v", torn)
	}
	// Routine after a kill -9: one INFO line that says so, no warning, no stack trace.
	var tornLines []string
	for _, l := range strings.Split(logged.String(), "\n") {
		if strings.Contains(l, "torn") {
			tornLines = append(tornLines, l)
		}
	}
	if len(tornLines) != 1 || !strings.Contains(tornLines[0], "level=INFO") || strings.Contains(logged.String(), "stack") {
		t.Fatalf("log at info, want one INFO line about the torn write and no stack trace:\n%s", logged.String())
	}
	for i := range n {
		_, closer, err := s2.DB().Get(LogKey(event.Rank{WorkerID: 1}, uint64(i)))
		if want := i < n-1; (err == nil) != want {
			t.Fatalf("key %d present=%v, want %v", i, err == nil, want)
		}
		if err == nil {
			closer.Close()
		}
	}
}

func TestMapErrorMarksCorruption(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{cerrors.Mark(cerrors.New("bad block"), pebble.ErrCorruption), ErrCorruption},
		{pebble.ErrCorruption, ErrCorruption},
		{fmt.Errorf("ctx: %w", pebble.ErrCorruption), ErrCorruption},
		{pebble.ErrClosed, pebble.ErrClosed},
	} {
		got := MapError("op", tc.err)
		if !errors.Is(got, tc.want) {
			t.Errorf("MapError(%v) = %v, not %v", tc.err, got, tc.want)
		}
		if tc.want != ErrCorruption && errors.Is(got, ErrCorruption) {
			t.Errorf("MapError(%v) marked as corruption", tc.err)
		}
		if !strings.HasPrefix(got.Error(), "op: ") {
			t.Errorf("MapError lost its context: %v", got)
		}
	}
}

func TestKeys(t *testing.T) {
	r := event.Rank{Partition: 0xe0e1e2e3, WorkerID: 0x0102030405060708, DPRank: 0x0a0b0c0d}
	k := LogKey(r, 0x1112131415161718)
	want := []byte{'L', 0xe0, 0xe1, 0xe2, 0xe3, 1, 2, 3, 4, 5, 6, 7, 8, 0xa, 0xb, 0xc, 0xd, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18}
	if !bytes.Equal(k, want) {
		t.Fatalf("LogKey = %x, want %x", k, want)
	}
	if got, id, ok := ParseLogKey(k); !ok || got != r || id != 0x1112131415161718 {
		t.Fatalf("ParseLogKey = %v %x %v", got, id, ok)
	}
	for _, tc := range []struct {
		in, want []byte
	}{
		{[]byte{'L', 1, 2}, []byte{'L', 1, 3}},
		{[]byte{'L', 1, 0xff}, []byte{'L', 2}},
		{[]byte{'L', 0xff, 0xff}, []byte{'M'}},
		{[]byte{0xff, 0xff}, nil},
	} {
		if got := PrefixEnd(tc.in); !bytes.Equal(got, tc.want) {
			t.Errorf("PrefixEnd(%x) = %x, want %x", tc.in, got, tc.want)
		}
	}
	if !bytes.Equal(MetaKey(r, 'c'), append(RankKey(PrefixRankMeta, r), 'c')) {
		t.Error("MetaKey layout")
	}
	if name, ok := GlobalName(GlobalKey("source/7")); !ok || name != "source/7" {
		t.Errorf("GlobalName = %q %v", name, ok)
	}
	if _, _, ok := ParseLogKey(GapKey(r, 1)); ok {
		t.Error("a gap key parsed as a log key")
	}
}

// Byte order of keys is numeric order of (worker, dp, id), every log key of a rank lies inside
// its bounds, and keys round-trip.
func TestKeyOrderProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		gen := func(label string) (event.Rank, uint64) {
			w := rapid.OneOf(rapid.Uint64Range(0, 3), rapid.Uint64(), rapid.Just(uint64(math.MaxUint64))).Draw(t, label+"w")
			d := rapid.OneOf(rapid.Uint32Range(0, 3), rapid.Uint32(), rapid.Just(uint32(math.MaxUint32))).Draw(t, label+"d")
			id := rapid.OneOf(rapid.Uint64Range(0, 3), rapid.Uint64()).Draw(t, label+"id")
			return event.Rank{WorkerID: w, DPRank: d}, id
		}
		ra, ia := gen("a")
		rb, ib := gen("b")
		ka, kb := LogKey(ra, ia), LogKey(rb, ib)
		less := ra.Less(rb) || (ra == rb && ia < ib)
		if got := bytes.Compare(ka, kb) < 0; got != less {
			t.Fatalf("order of %v/%d vs %v/%d: bytes say %v", ra, ia, rb, ib, got)
		}
		lo, hi := RankLogBounds(ra)
		if bytes.Compare(ka, lo) < 0 || bytes.Compare(ka, hi) >= 0 {
			t.Fatalf("%x outside its rank bounds [%x, %x)", ka, lo, hi)
		}
		inB := bytes.Compare(kb, lo) >= 0 && bytes.Compare(kb, hi) < 0
		if inB != (ra == rb) {
			t.Fatalf("key of %v inside bounds of %v: %v", rb, ra, inB)
		}
		gr, gid, ok := ParseLogKey(ka)
		if !ok || gr != ra || gid != ia {
			t.Fatalf("ParseLogKey(%x) = %v %d %v", ka, gr, gid, ok)
		}
	})
}

// Space freed by a DeleteRange comes back after CompactAll; a checkpoint opens as a store.
func TestCompactAllAndCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir+"/data", Options{Logger: quietLogger(), MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := event.Rank{WorkerID: 1}
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 512)
	b := s.DB().NewBatch()
	for i := range 20_000 {
		for j := range val {
			val[j] = byte(rng.Uint32())
		}
		_ = b.Set(LogKey(r, uint64(i)), val, nil) // incompressible, so sizes are meaningful
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.CompactAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	lo, hi := RankLogBounds(r)
	full, err := s.DB().EstimateDiskUsage(lo, hi)
	if err != nil || full < 1<<20 {
		t.Fatalf("estimated usage %d, %v", full, err)
	}
	if err := s.Checkpoint(dir + "/backup"); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().DeleteRange(lo, hi, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.CompactAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	if after, _ := s.DB().EstimateDiskUsage(lo, hi); after >= full/10 || s.DiskUsage() == 0 {
		t.Errorf("disk usage %d after deleting everything, %d before", after, full)
	}
	c, err := Open(dir+"/backup", Options{Logger: quietLogger(), ReadOnly: true})
	if err != nil {
		t.Fatalf("open checkpoint: %v", err)
	}
	defer c.Close()
	if _, closer, err := c.DB().Get(LogKey(r, 19_999)); err != nil {
		t.Errorf("checkpoint lacks the last key: %v", err)
	} else {
		closer.Close()
	}
}

// A process that holds Pebble's own LOCK (a Pebble tool bypassing kvindex.lock) also makes Open
// fail with ErrLocked.
func TestPebbleLockHeld(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, fs, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	lk, err := pebble.LockDirectory("data", fs)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	if _, err := openMem(t, fs, Options{}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "Pebble LOCK") {
		t.Fatalf("open with Pebble's LOCK held: %v, want ErrLocked", err)
	}
}
