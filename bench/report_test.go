package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestFormatValue(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {7, "7"}, {0.0614, "0.061"}, {349.44, "349.4"}, {1268, "1,268"},
		{1335665.4, "1,335,665"}, {-398.4, "-398.4"}, {-12345, "-12,345"}, {123456789, "123,456,789"},
	} {
		if got := FormatValue(tc.v); got != tc.want {
			t.Errorf("FormatValue(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestReportJSONLines(t *testing.T) {
	rep := &Report{}
	rep.add(MetricEvents, 305, UnitCount)
	rep.add(MetricIngestVsCeiling, 0.5, UnitRatio)
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	want := "{\"metric\":\"events\",\"value\":305,\"unit\":\"count\"}\n{\"metric\":\"ingest_vs_ceiling\",\"value\":0.5,\"unit\":\"ratio\"}\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	sc := bufio.NewScanner(&b)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || len(m) != 3 {
			t.Fatalf("line %q: %v %v", sc.Text(), m, err)
		}
	}
}

func TestSpliceSection(t *testing.T) {
	sec := func(s string) []byte { return []byte(s + "\n") }
	for _, tc := range []struct {
		name, doc, key, section, want string
	}{
		{"empty file", "", "k", "table", "<!-- bench:begin k -->\ntable\n<!-- bench:end k -->\n"},
		{"append after prose", "# Title\nprose\n", "k", "table",
			"# Title\nprose\n\n<!-- bench:begin k -->\ntable\n<!-- bench:end k -->\n"},
		{"replace in place", "a\n<!-- bench:begin k -->\nold\n<!-- bench:end k -->\nz\n", "k", "new",
			"a\n<!-- bench:begin k -->\nnew\n<!-- bench:end k -->\nz\n"},
		{"other key untouched", "<!-- bench:begin j -->\nj\n<!-- bench:end j -->\n", "k", "new",
			"<!-- bench:begin j -->\nj\n<!-- bench:end j -->\n\n<!-- bench:begin k -->\nnew\n<!-- bench:end k -->\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(spliceSection([]byte(tc.doc), tc.key, sec(tc.section))); got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestMemTotal(t *testing.T) {
	if got := memTotal("/nonexistent/meminfo"); got != 0 {
		t.Errorf("missing file: %d", got)
	}
	m := ThisMachine()
	if m.CPUs < 1 || !strings.HasPrefix(m.Go, "go") {
		t.Errorf("machine = %+v", m)
	}
}
