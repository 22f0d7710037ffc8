package store

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestPIDFileRemovedAtClose checks the rule "kvindex.pid names the owner only while the lock is
// held: Close removes it".
func TestPIDFileRemovedAtClose(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quietLogger(), MemTableSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, PIDFileName)); err != nil {
		t.Fatalf("pid file while open: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, PIDFileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("pid file after Close: %v, want it removed", err)
	}
	if _, err := os.Stat(filepath.Join(dir, LockFileName)); err != nil {
		t.Fatalf("lock file after Close: %v, want it kept (it marks a kvindex dir)", err)
	}
}

// TestUnwritableDirIsPermissionDenied checks the rule "a data dir this user cannot create or
// write is reported as permission denied (ErrPermission), never as locked by another process".
func TestUnwritableDirIsPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		rerunAsNobody(t) // root ignores file permissions: the rule is checked as the user nobody
		return
	}
	parent := t.TempDir()
	existing := filepath.Join(parent, "existing")
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(existing, 0o500); err != nil {
		t.Fatal(err)
	}
	locked := t.TempDir()
	if err := os.Chmod(locked, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(existing, 0o755); _ = os.Chmod(locked, 0o755) })
	for _, tc := range []struct{ name, dir string }{
		{"new dir under a read-only parent", filepath.Join(locked, "data")},
		{"existing read-only dir", existing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tc.dir, Options{Logger: quietLogger()})
			if !errors.Is(err, ErrPermission) || !errors.Is(err, fs.ErrPermission) || errors.Is(err, ErrLocked) {
				t.Fatalf("open: %v, want ErrPermission and not ErrLocked", err)
			}
			if !strings.Contains(err.Error(), "permission denied") || strings.Contains(err.Error(), "another") {
				t.Fatalf("message %q: want permission denied, no mention of another process", err)
			}
		})
	}
}

// TestForeignDirRefused checks the rule "a non-empty dir without kvindex.lock is not a kvindex
// data dir: Open refuses it (ErrNotDataDir) unless Force; a new, empty or kvindex dir opens".
func TestForeignDirRefused(t *testing.T) {
	fs := vfs.NewMem()
	if err := fs.MkdirAll("foreign", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("foreign/notes.txt", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if err := fs.MkdirAll("empty", 0o755); err != nil {
		t.Fatal(err)
	}
	opts := Options{FS: fs, Logger: quietLogger(), MemTableSize: 4 << 20}
	if _, err := Open("foreign", opts); !errors.Is(err, ErrNotDataDir) || !strings.Contains(err.Error(), "it holds 1 file (e.g. notes.txt) and no kvindex.lock") {
		t.Fatalf("open foreign dir: %v, want ErrNotDataDir naming the file", err)
	}
	if names, _ := fs.List("foreign"); len(names) != 1 {
		t.Fatalf("refused dir was written to: %v", names)
	}
	for _, tc := range []struct {
		dir   string
		force bool
	}{{"new", false}, {"empty", false}, {"foreign", true}, {"new", false} /* reopen: a kvindex dir now */} {
		o := opts
		o.Force = tc.force
		s, err := Open(tc.dir, o)
		if err != nil {
			t.Fatalf("open %s (force %v): %v", tc.dir, tc.force, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPebbleInfoAtDebug checks the rule "Pebble's info lines are logged at debug level: an
// operator at the default info level does not see them".
func TestPebbleInfoAtDebug(t *testing.T) {
	for _, tc := range []struct {
		level slog.Level
		want  bool
	}{{slog.LevelInfo, false}, {slog.LevelDebug, true}} {
		var buf strings.Builder
		l := pebbleLogger{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level}))}
		l.Infof("replaying WAL %d", 7)
		if got := strings.Contains(buf.String(), "level=DEBUG") && strings.Contains(buf.String(), "replaying WAL 7"); got != tc.want {
			t.Errorf("handler level %v: logged %q, want shown %v", tc.level, buf.String(), tc.want)
		}
	}
}

// TestReadOnlyWritesNothing checks the rule "a read-only Open writes nothing into the dir: a
// missing, empty or foreign dir is refused (ErrNoData, ErrNotDataDir) and keeps its files; a
// kvindex dir gets no lock, pid or Pebble LOCK file".
func TestReadOnlyWritesNothing(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{FS: fs, Logger: quietLogger(), MemTableSize: 4 << 20}
	s, err := Open("kv", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{LockFileName, pebbleLockName} { // a copy without lock files
		if err := fs.Remove("kv/" + n); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"empty", "foreign"} {
		if err := fs.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f, err := fs.Create("foreign/notes.txt", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	for _, tc := range []struct {
		dir     string
		wantErr error
		wantMsg string
	}{
		{"missing", ErrNoData, "the dir does not exist"},
		{"empty", ErrNoData, "the dir is empty"},
		{"foreign", ErrNotDataDir, "it holds 1 file (e.g. notes.txt) but no kvindex store"},
		{"kv", nil, ""},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			before, _ := fs.List(tc.dir)
			o := opts
			o.ReadOnly = true
			s, err := Open(tc.dir, o)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Fatalf("read-only open: %v, want %v saying %q", err, tc.wantErr, tc.wantMsg)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if s.LockState() != LockNoFile {
					t.Errorf("lock state %v, want %v", s.LockState(), LockNoFile)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			after, _ := fs.List(tc.dir)
			slices.Sort(before)
			slices.Sort(after)
			if !slices.Equal(before, after) {
				t.Fatalf("read-only open changed the dir's files: %v, then %v", before, after)
			}
		})
	}
}

// TestReadOnlyCopy checks the rule "a read-only Open reads a read-only copy of a data dir (an
// operator's snapshot or backup), writing nothing, and holds a shared lock: readers share the
// dir, a read-write Open is refused until they close".
func TestReadOnlyCopy(t *testing.T) {
	if os.Geteuid() == 0 {
		rerunAsNobody(t) // root ignores file permissions: the rule is checked as the user nobody
		return
	}
	src := filepath.Join(t.TempDir(), "data")
	s, err := Open(src, Options{Logger: quietLogger(), MemTableSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Set([]byte("k"), []byte("v"), nil); err != nil { // in the WAL only
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	chmodTree(t, dst, 0o444, 0o555)
	t.Cleanup(func() { chmodTree(t, dst, 0o644, 0o755) })
	before, _ := os.ReadDir(dst)

	ro, err := Open(dst, Options{Logger: quietLogger(), ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open of a read-only copy: %v", err)
	}
	if ro.LockState() != LockShared || ro.Version() != FormatVersion {
		t.Errorf("lock state %v, version %d: want %v, %d", ro.LockState(), ro.Version(), LockShared, FormatVersion)
	}
	if v, closer, err := ro.DB().Get([]byte("k")); err != nil || string(v) != "v" {
		t.Errorf("get from the copy: %q, %v", v, err)
	} else {
		closer.Close()
	}
	// A second reader shares the dir.
	ro2, err := Open(dst, Options{Logger: quietLogger(), ReadOnly: true})
	if err != nil {
		t.Fatalf("second read-only open: %v", err)
	}
	if err := ro2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadDir(dst)
	if len(before) != len(after) {
		t.Fatalf("the copy's files changed: %d, then %d", len(before), len(after))
	}

	// While a reader holds the original, a read-write Open is refused; after it, it opens.
	ro, err = Open(src, Options{Logger: quietLogger(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(src, Options{Logger: quietLogger(), MemTableSize: 4 << 20}); !errors.Is(err, ErrLocked) {
		t.Fatalf("read-write open under a reader: %v, want ErrLocked", err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	rw, err := Open(src, Options{Logger: quietLogger(), MemTableSize: 4 << 20})
	if err != nil {
		t.Fatalf("read-write open after the reader closed: %v", err)
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
}

// chmodTree sets every file of dir to file and every dir to dirMode (dirs last on the way down,
// so a read-only dir is still listed).
func chmodTree(t *testing.T, dir string, file, dirMode os.FileMode) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, dirMode|0o100)
		}
		return os.Chmod(p, file)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		t.Fatal(err)
	}
}
