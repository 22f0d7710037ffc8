package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
)

// TestOfflineCLI runs the offline commands in-process on a real dir: exit codes, stdout/stderr
// placement, usage errors, the locked-dir refusal and --out.
func TestOfflineCLI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(st, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := l.NewBatch()
	r := event.Rank{WorkerID: 7}
	for i, ev := range []event.RouterEvent{
		event.Stored(r, 1, nil, event.Block{BlockHash: 1, TokensHash: 10}),
		event.Stored(r, 2, u64p(1), event.Block{BlockHash: 2, TokensHash: 20}),
	} {
		b.Append(&ev)
		b.SetCursor(r, wal.Cursor{LastEventID: uint64(i + 1)})
	}
	if err := l.Commit(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	b.Close()

	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append([]string{"kvindex"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	// Held by "a server": every offline command exits 1 with one clear line.
	for _, cmd := range []string{"compact", "export", "inspect", "verify"} {
		code, _, stderr := cli(cmd, "--data-dir", dir)
		if code != 1 || !strings.Contains(stderr, "refusing while a server holds the data dir") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%s on a held dir: exit %d, stderr %q", cmd, code, stderr)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // substring
		stderr string // substring
	}{
		{[]string{"verify", "--data-dir", dir}, 0, "1 ranks, 2 log records, 2 blocks: clean", ""},
		{[]string{"inspect", "--data-dir", dir}, 0, "log: 2 events, ids 1-2", ""},
		{[]string{"inspect", "--data-dir", dir, "--json"}, 0, `"events_retained": 2`, ""},
		{[]string{"export", "--data-dir", dir}, 0, `"event_id":2`, "exported 2 events of 1 rank"},
		{[]string{"export", "--data-dir", dir, "--what", "dump", "--worker-id", "7", "--dp-rank", "0"}, 0, `"blocks":[{"block_hash":1,"tokens_hash":10},{"block_hash":2,"tokens_hash":20}]`, "rank 7/0: 1 event"},
		{[]string{"export", "--data-dir", dir, "--what", "tree"}, 2, "", "usage: --what"},
		{[]string{"export", "--data-dir", dir, "--dp-rank", "1"}, 2, "", "usage: --dp-rank needs --worker-id"},
		{[]string{"export", "--data-dir", dir, "--what", "dump", "--from", "3"}, 2, "", "usage: --from"},
		{[]string{"verify", "--data-dir", dir, "extra"}, 2, "", "usage: verify takes no arguments"},
		{[]string{"compact", "--data-dir", dir}, 0, "folded 1 of 1 ranks, 2 events", ""},
		{[]string{"inspect", "--data-dir", dir}, 0, "snapshot: at 2, 1 event, 2 blocks", ""},
		{[]string{"verify", "--data-dir", filepath.Join(dir, "missing")}, 1, "", "no kvindex data"},
	} {
		code, stdout, stderr := cli(tc.args...)
		if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("kvindex %s: exit %d (want %d)\nstdout %q (want %q)\nstderr %q (want %q)",
				strings.Join(tc.args, " "), code, tc.code, stdout, tc.stdout, stderr, tc.stderr)
		}
	}

	out := filepath.Join(t.TempDir(), "events.ndjson")
	if code, stdout, stderr := cli("export", "--data-dir", dir, "--out", out); code != 0 || stdout != "" {
		t.Fatalf("export --out: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	segs, err := partition.Split(data)
	if err != nil || len(segs) != 1 || segs[0].Key != partition.Default {
		t.Fatalf("export --out after compact: %v, %+v: want the default partition's line first", err, segs)
	}
	evs, err := event.DecodeNDJSON(bytes.NewReader(segs[0].Body))
	if err != nil || len(evs) != 1 || evs[0].EventID != 2 || len(evs[0].Blocks) != 2 {
		t.Fatalf("export --out after compact: %v %+v", err, evs)
	}
}

// TestOfflineCLIPartitions guards the seam "the offline commands know partitions" at the CLI: on
// a real dir with a rank in the default partition and one in llama:default (block size 32),
// verify is clean, inspect lists both partitions and their sizes on disk, export writes each
// partition's line before its events (and none with --model-name).
func TestOfflineCLIPartitions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := wal.Open(st, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := partition.Open(l, 16, index.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parts.Ensure(t.Context(), partition.Default, 16); err != nil {
		t.Fatal(err)
	}
	llama, err := parts.Ensure(t.Context(), partition.Key{ModelName: "llama", RoutingGroup: "default"}, 32)
	if err != nil {
		t.Fatal(err)
	}
	b := l.NewBatch()
	for _, r := range []event.Rank{{WorkerID: 7}, {Partition: llama.ID, WorkerID: 21}} {
		for i, ev := range []event.RouterEvent{
			event.Stored(r, 1, nil, event.Block{BlockHash: 1, TokensHash: 10}),
			event.Stored(r, 2, u64p(1), event.Block{BlockHash: 2, TokensHash: 20}),
		} {
			b.Append(&ev)
			b.SetCursor(r, wal.Cursor{LastEventID: uint64(i + 1)})
		}
	}
	if err := l.Commit(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append([]string{"kvindex"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	defLine := `{"partition":{"model_name":"default","routing_group":"default","block_size":16}}` + "\n"
	llamaLine := `{"partition":{"model_name":"llama","routing_group":"default","block_size":32}}` + "\n"
	for _, tc := range []struct {
		args   []string
		stdout []string // substrings, in this order
		stderr string   // substring
	}{
		{[]string{"verify", "--data-dir", dir}, []string{"2 ranks, 2 partitions", "2 ranks, 4 log records, 4 blocks: clean"}, ""},
		{[]string{"inspect", "--data-dir", dir}, []string{"partition 1 llama:default (block size 32): 1 rank", "rank 21/0 (llama:default)", "bytes on disk (du)"}, ""},
		{[]string{"export", "--data-dir", dir}, []string{defLine + `{"worker_id":7,`, llamaLine + `{"worker_id":21,`}, "in 2 partitions"},
		{[]string{"export", "--data-dir", dir, "--what", "dump", "--worker-id", "21"}, []string{llamaLine + `{"worker_id":21,`}, "rank 21/0 (llama:default): 1 event"},
		{[]string{"export", "--data-dir", dir, "--model-name", "llama"}, []string{`{"worker_id":21,`}, "exported 2 events of 1 rank\n"},
		{[]string{"compact", "--data-dir", dir}, []string{"compact " + dir + ": 2 ranks, 2 partitions", "rank 21/0 (llama:default): folded 2 events", "bytes on disk (du) before"}, ""},
		{[]string{"verify", "--data-dir", dir}, []string{"2 ranks, 0 log records, 4 blocks: clean"}, ""},
	} {
		code, stdout, stderr := cli(tc.args...)
		rest, ok := stdout, true
		for _, want := range tc.stdout {
			i := strings.Index(rest, want)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(want):]
		}
		if code != 0 || !ok || !strings.Contains(stderr, tc.stderr) || (slices.Contains(tc.args, "--model-name") && strings.Contains(stdout, `"partition"`)) {
			t.Errorf("kvindex %s: exit %d\nstdout %q (want %q)\nstderr %q (want %q)", strings.Join(tc.args, " "), code, stdout, tc.stdout, stderr, tc.stderr)
		}
	}
}

func u64p(v uint64) *uint64 { return &v }
