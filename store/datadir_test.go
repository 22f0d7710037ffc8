package store

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
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
	if _, err := Open("foreign", opts); !errors.Is(err, ErrNotDataDir) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("open foreign dir: %v, want ErrNotDataDir naming --force", err)
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
