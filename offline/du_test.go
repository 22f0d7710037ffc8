//go:build unix

package offline

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
)

// TestDiskUsageAsDuSeesThem checks the rule "the store size is the space files take on disk, as
// du counts it, not their apparent sizes": a sparse 8 MiB file takes (almost) nothing, 64 KiB of
// data take at least 64 KiB.
func TestDiskUsageAsDuSeesThem(t *testing.T) {
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
	u, err := diskUsage(vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	if u.Bytes < 64<<10 || u.Bytes >= 8<<20 {
		t.Fatalf("diskUsage = %d, want the allocated ~64 KiB, not the 8 MiB apparent size of the sparse file", u.Bytes)
	}
}

// TestStoreSizeIsDu checks that inspect and compact print one store size, the number du prints
// for the data dir (GNU du, skipped where there is none): on a real dir written through the
// write path (WAL preallocated), inspect's size equals `du -s --block-size=1` and compact's
// before equals it too.
func TestStoreSizeIsDu(t *testing.T) {
	du := func(dir string) uint64 {
		out, err := exec.Command("du", "-s", "--block-size=1", dir).Output()
		if err != nil {
			t.Skipf("no GNU du: %v", err)
		}
		n, err := strconv.ParseUint(strings.Fields(string(out))[0], 10, 64)
		if err != nil {
			t.Skipf("du printed %q", out)
		}
		return n
	}
	root := t.TempDir()
	t.Chdir(root) // the test dir is relative
	fs := vfs.Default
	s := openRW(t, fs)
	r := event.Rank{WorkerID: 1}
	for id := uint64(1); id <= 50; id++ {
		if _, err := s.pipe.Submit(bg, []event.RouterEvent{event.Stored(r, id, nil, event.Block{BlockHash: id, TokensHash: id})}); err != nil {
			t.Fatal(err)
		}
	}
	s.close(t)
	want := du(filepath.Join(root, testDir))
	var out bytes.Buffer
	rep, err := Inspect(bg, &out, InspectOptions{Options: testOptions(fs)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Disk.Total != want || !strings.Contains(out.String(), "size: "+strconv.FormatUint(want, 10)+" bytes on disk (du)") {
		t.Fatalf("inspect: size %d, du %d\n%s", rep.Disk.Total, want, out.String())
	}
	if rep.Disk.WAL == 0 || rep.Pebble.WALFiles == 0 {
		t.Fatalf("inspect: WAL %d bytes in %d files: want the WAL on disk counted\n%s", rep.Disk.WAL, rep.Pebble.WALFiles, out.String())
	}
	out.Reset()
	res, err := Compact(bg, &out, CompactOptions{Options: testOptions(fs)})
	if err != nil {
		t.Fatal(err)
	}
	if res.BytesBefore != want || res.BytesAfter != du(filepath.Join(root, testDir)) || !strings.Contains(out.String(), "bytes on disk (du) before") {
		t.Fatalf("compact: %d before, %d after; du %d before\n%s", res.BytesBefore, res.BytesAfter, want, out.String())
	}
}
