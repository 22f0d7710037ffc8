package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/bench"
)

// headOfTrace writes the first n lines of the repo's conversation trace to a temp file.
func headOfTrace(t *testing.T, n int) string {
	t.Helper()
	b, err := os.ReadFile("../../testdata/conversation_trace.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfterN(string(b), "\n", n+1)
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines[:n], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBenchCommandJSON(t *testing.T) {
	trace := headOfTrace(t, 120)
	md := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(md, []byte("# Results\n\nprose stays\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"kvindex", "--log-level", "warn", "bench", "--trace", trace, "--scale", "2",
		"--workers", "6", "--producers", "3", "--batch", "4", "--durability", "none", "--lanes", "1",
		"--loaded-max", "2s", "--json", "--markdown", md}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	got := map[string]float64{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var m struct {
			Metric string   `json:"metric"`
			Value  *float64 `json:"value"`
			Unit   string   `json:"unit"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.Metric == "" || m.Value == nil || m.Unit == "" {
			t.Fatalf("line %q: %+v %v", sc.Text(), m, err)
		}
		got[m.Metric] = *m.Value
	}
	for _, name := range bench.RequiredMetrics {
		if _, ok := got[name]; !ok {
			t.Errorf("metric %s missing from --json output", name)
		}
	}
	if got[bench.MetricEvents] <= 0 || got[bench.MetricIngestEventsPerS] <= 0 {
		t.Errorf("events %v, ingest %v: want > 0", got[bench.MetricEvents], got[bench.MetricIngestEventsPerS])
	}
	doc, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"prose stays", "<!-- bench:begin scale 2, producers 3, batch 4, durability none -->",
		"| `ingest_vs_ceiling` |", "--workers 6", "CPUs"} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("markdown lacks %q:\n%s", want, doc)
		}
	}
}

func TestBenchAndLoadgenUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"no trace", []string{"bench"}, "exactly one of --trace"},
		{"both inputs", []string{"bench", "--trace", "a", "--workload", "b"}, "exactly one of --trace"},
		{"bad durability", []string{"bench", "--trace", "a", "--durability", "maybe"}, "durability"},
		{"zero batch", []string{"bench", "--trace", "a", "--batch", "0"}, "--batch must be > 0"},
		{"remote target", []string{"loadgen", "--trace", "a", "--target", "http://10.9.8.7:7070"}, "not a loopback address"},
		{"loadgen without trace", []string{"loadgen", "--target", "http://127.0.0.1:1"}, "--trace FILE is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"kvindex"}, tc.args...), &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.msg) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.msg)
			}
		})
	}
}
