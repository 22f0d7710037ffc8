package testutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// CopyDir copies the files of the OS dir src into dir dst of fs (a committed data dir into a
// MemFS or CrashableMem), each synced, so a crash clone keeps them.
func CopyDir(t testing.TB, fs vfs.FS, src, dst string) {
	t.Helper()
	if err := fs.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	files, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range files {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		f, err := fs.Create(fs.PathJoin(dst, e.Name()), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
