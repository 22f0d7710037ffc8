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

// jsonMetrics reads --json output: one {"metric","value","unit"} object per line, each field
// present.
func jsonMetrics(t *testing.T, out *bytes.Buffer) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	sc := bufio.NewScanner(out)
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
	return got
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
	got := jsonMetrics(t, &stdout)
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
		{"bad durability", []string{"bench", "--trace", "a", "--durability", "maybe"}, `--durability "maybe": want sync`},
		{"zero batch", []string{"bench", "--trace", "a", "--batch", "0"}, "--batch must be > 0"},
		{"remote target", []string{"loadgen", "--trace", "a", "--target", "http://10.9.8.7:7070"}, "not a loopback address"},
		{"loadgen without trace", []string{"loadgen", "--target", "http://127.0.0.1:1"}, "--trace FILE is required"},
		{"loadgen bad answer format", []string{"loadgen", "--trace", "a", "--target", "http://127.0.0.1:1", "--answer-format", "xml"}, "--answer-format"},
		{"loadgen negative top-k", []string{"loadgen", "--trace", "a", "--target", "http://127.0.0.1:1", "--top-k", "-1"}, "--top-k"},
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

// TestLoadgenCommandReportsTheWire: `kvindex loadgen` against a running server reports the wire's
// metrics (find_matches and healthz p50s, their ratio, idle and loaded) in --json and writes them,
// with their targets, into its own section of the --markdown file.
func TestLoadgenCommandReportsTheWire(t *testing.T) {
	p := start(t, t.TempDir(), "--durability", "none")
	md := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	var stdout, stderr bytes.Buffer
	code := run([]string{"kvindex", "--log-level", "warn", "loadgen", "--target", p.base, "--trace", headOfTrace(t, 60),
		"--workers", "6", "--clients", "2", "--batch", "8", "--idle-queries", "30", "--answer-format", "msgpack",
		"--top-k", "3", "--json", "--markdown", md}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	got := jsonMetrics(t, &stdout)
	for _, name := range []string{bench.MetricHTTPFindP50, bench.MetricHTTPHealthzP50, bench.MetricHTTPOverhead,
		bench.MetricHTTPFindLoadedP50, bench.MetricHTTPHealthzLoadedP50, bench.MetricHTTPOverheadLoaded} {
		if v, ok := got[name]; !ok || !(v > 0) {
			t.Errorf("metric %s = %v (present %v), want > 0", name, v, ok)
		}
	}
	doc, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<!-- bench:begin loadgen scale 1, clients 2, batch 8, format json, answers msgpack, top-k 3 -->",
		"| `http_overhead` |", "| ≤ 2 |", "| `http_healthz_loaded_p50_ns` |", "--top-k 3", "--answer-format msgpack"} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("markdown lacks %q:\n%s", want, doc)
		}
	}
}
