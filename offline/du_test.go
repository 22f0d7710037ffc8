//go:build unix

package offline

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestDirBytesAsDuSeesThem checks the rule "compact's byte counts are the space files take on
// disk, as du counts it, not their apparent sizes": a sparse 8 MiB file takes (almost) nothing,
// 64 KiB of data take at least 64 KiB.
func TestDirBytesAsDuSeesThem(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(8 << 20); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if err := os.WriteFile(filepath.Join(dir, "data"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := dirBytes(vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	if n < 64<<10 || n >= 8<<20 {
		t.Fatalf("dirBytes = %d, want the allocated ~64 KiB, not the 8 MiB apparent size of the sparse file", n)
	}
}
