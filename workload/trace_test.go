package workload

import (
	"errors"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestLoadTraceFixture(t *testing.T) {
	got, err := LoadTraceFile("testdata/trace_small.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// The blank third line is skipped, the unknown field ignored, the largest uint64 kept exactly.
	want := []Request{
		{Timestamp: 0, InputLength: 1500, OutputLength: 20, HashIDs: []uint64{0, 1, 2}},
		{Timestamp: 0, InputLength: 1100, OutputLength: 7, HashIDs: []uint64{0, 1, 3}},
		{Timestamp: 1500, InputLength: 300, OutputLength: 0, HashIDs: []uint64{4}},
		{Timestamp: 2000, InputLength: 100, OutputLength: 1, HashIDs: []uint64{}},
		{Timestamp: 2500, InputLength: 512, OutputLength: 9, HashIDs: []uint64{1<<64 - 1}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("LoadTraceFile:\n got %+v\nwant %+v", got, want)
	}
}

func TestLoadTraceBadLines(t *testing.T) {
	good := `{"timestamp": 1, "input_length": 512, "output_length": 2, "hash_ids": [7]}` + "\n"
	for _, tc := range []struct {
		name, input, want string
	}{
		{"not json", good + "hello\n", "trace line 2: "},
		{"not an object", good + good + "[1, 2]\n", "trace line 3: "},
		{"missing timestamp", `{"input_length": 1, "output_length": 1, "hash_ids": []}`, "trace line 1: bad trace: missing timestamp"},
		{"missing input_length", `{"timestamp": 1, "output_length": 1, "hash_ids": []}`, "trace line 1: bad trace: missing input_length"},
		{"missing output_length", `{"timestamp": 1, "input_length": 1, "hash_ids": []}`, "trace line 1: bad trace: missing output_length"},
		{"missing hash_ids", `{"timestamp": 1, "input_length": 1, "output_length": 1}`, "trace line 1: bad trace: missing hash_ids"},
		{"null hash_ids", `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": null}`, "trace line 1: bad trace: missing hash_ids"},
		{"negative timestamp", `{"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": []}`, "trace line 1: bad trace: negative timestamp -1"},
		{"negative input", `{"timestamp": 1, "input_length": -5, "output_length": 1, "hash_ids": []}`, "trace line 1: bad trace: negative input_length -5"},
		{"negative output", `{"timestamp": 1, "input_length": 5, "output_length": -1, "hash_ids": []}`, "trace line 1: bad trace: negative output_length -1"},
		{"negative hash id", good + "\n\n" + `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1, -2]}`, "trace line 4: "},
		{"fractional hash id", `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1.5]}`, "trace line 1: "},
		{"hash id above 2^64-1", `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [18446744073709551616]}`, "trace line 1: "},
		{"string timestamp", `{"timestamp": "1", "input_length": 1, "output_length": 1, "hash_ids": []}`, "trace line 1: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqs, err := LoadTrace(strings.NewReader(tc.input))
			if err == nil {
				t.Fatalf("LoadTrace = %d requests, want an error", len(reqs))
			}
			if !errors.Is(err, ErrBadTrace) {
				t.Errorf("error %q does not wrap ErrBadTrace", err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error %q, want prefix %q", err, tc.want)
			}
		})
	}
}

func TestLoadTraceEmpty(t *testing.T) {
	reqs, err := LoadTrace(strings.NewReader("\n  \n"))
	if err != nil || len(reqs) != 0 {
		t.Fatalf("LoadTrace(blank) = %v, %v; want no requests, no error", reqs, err)
	}
}

func TestLoadTraceFileErrors(t *testing.T) {
	if _, err := LoadTraceFile("testdata/no-such-trace.jsonl"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	path := t.TempDir() + "/bad.jsonl"
	writeFile(t, path, "{}\n")
	_, err := LoadTraceFile(path)
	if !errors.Is(err, ErrBadTrace) || !strings.Contains(err.Error(), path+": trace line 1: ") {
		t.Errorf("bad file: %v, want the path, the line and ErrBadTrace", err)
	}
}

// The real trace (testdata/SOURCE.md): 12,031 requests, one hash id per started 512-token block.
func TestLoadRealTrace(t *testing.T) {
	reqs, err := LoadTraceFile("../testdata/conversation_trace.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 12031 {
		t.Fatalf("%d requests, want 12031", len(reqs))
	}
	for i, r := range reqs {
		if want := (r.InputLength + 511) / 512; len(r.HashIDs) != want {
			t.Fatalf("request %d: %d hash ids for %d tokens, want %d", i, len(r.HashIDs), r.InputLength, want)
		}
		if i > 0 && r.Timestamp < reqs[i-1].Timestamp {
			t.Fatalf("request %d: timestamp %d before %d", i, r.Timestamp, reqs[i-1].Timestamp)
		}
	}
}

func TestScale(t *testing.T) {
	reqs := []Request{
		{Timestamp: 5, InputLength: 1024, OutputLength: 3, HashIDs: []uint64{0, 1}},
		{Timestamp: 9, InputLength: 600, OutputLength: 4, HashIDs: []uint64{999_999_999}},
		{Timestamp: 9, InputLength: 10, OutputLength: 1, HashIDs: []uint64{}},
	}
	const k = 3
	copies, err := Scale(reqs, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != k {
		t.Fatalf("%d copies, want %d", len(copies), k)
	}
	for c, cp := range copies {
		if len(cp) != len(reqs) {
			t.Fatalf("copy %d: %d requests, want %d", c, len(cp), len(reqs))
		}
		for i, r := range cp {
			o := reqs[i]
			if r.Timestamp != o.Timestamp || r.InputLength != o.InputLength || r.OutputLength != o.OutputLength {
				t.Errorf("copy %d request %d: %+v, want the lengths and timestamp of %+v", c, i, r, o)
			}
			if len(r.HashIDs) != len(o.HashIDs) {
				t.Fatalf("copy %d request %d: %d ids, want %d", c, i, len(r.HashIDs), len(o.HashIDs))
			}
			for j, id := range r.HashIDs {
				if want := o.HashIDs[j] + uint64(c)*1_000_000_000; id != want {
					t.Errorf("copy %d request %d id %d = %d, want %d", c, i, j, id, want)
				}
			}
		}
	}
	// Copies own their ids: writing one changes neither the input nor another copy.
	copies[0][0].HashIDs[0] = 77
	copies[1][0].HashIDs = append(copies[1][0].HashIDs, 5)
	if reqs[0].HashIDs[0] != 0 || copies[2][0].HashIDs[0] != 2_000_000_000 || copies[1][1].HashIDs[0] != 1_999_999_999 {
		t.Errorf("copies share memory with the input or each other: %v %v %v", reqs[0], copies[1][1], copies[2][0])
	}
}

func TestScaleErrors(t *testing.T) {
	big := []Request{{HashIDs: []uint64{1_000_000_000}}}
	for _, tc := range []struct {
		name string
		reqs []Request
		k    int
		ok   bool
	}{
		{"k=0", nil, 0, false},
		{"k<0", nil, -2, false},
		{"id at the offset, one copy", big, 1, true},
		{"id at the offset, two copies", big, 2, false},
		{"empty trace", nil, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			copies, err := Scale(tc.reqs, tc.k)
			if tc.ok {
				if err != nil || len(copies) != tc.k {
					t.Fatalf("Scale = %d copies, %v; want %d copies", len(copies), err, tc.k)
				}
				return
			}
			if !errors.Is(err, ErrScale) {
				t.Fatalf("Scale error %v, want ErrScale", err)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
