package server

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"
)

var (
	// metricRe finds kvindex metric names in PromQL (label values and $variables never match).
	metricRe = regexp.MustCompile(`\bkvindex_[a-zA-Z0-9_]+`)
	fqNameRe = regexp.MustCompile(`fqName: "([^"]+)"`)
)

// exportedNames lists every metric name the server's registry can export: each registered
// collector's descriptors (so vectors that have no series yet count too) and what a scrape
// gathers.
func exportedNames(t *testing.T, s *Server) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, c := range s.m.collectors {
		ch := make(chan *prometheus.Desc)
		go func() {
			c.Describe(ch)
			close(ch)
		}()
		for d := range ch {
			m := fqNameRe.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("descriptor without fqName: %s", d)
			}
			names[m[1]] = true
		}
	}
	fams, err := s.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	return names
}

// exported reports whether name is exported, mapping a histogram's _bucket/_sum/_count series to
// the histogram.
func exported(names map[string]bool, name string) bool {
	if names[name] {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok && names[base] {
			return true
		}
	}
	return false
}

// dashboardExprs collects every "expr" string of a Grafana dashboard, at any depth.
func dashboardExprs(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "expr" {
				*out = append(*out, s)
				continue
			}
			dashboardExprs(e, out)
		}
	case []any:
		for _, e := range x {
			dashboardExprs(e, out)
		}
	}
}

// TestDeployMetricsExist (issue 16 item 3): every kvindex_* metric that the shipped
// Grafana dashboard (deploy/grafana/kvindex.json) and Prometheus alert rules
// (deploy/prometheus/alerts.yml) reference is exported by the server's registry; every alert
// has a name, an expression, a severity and a summary.
func TestDeployMetricsExist(t *testing.T) {
	s, _, stop := serveFS(t, vfs.NewMem())
	defer stop()
	names := exportedNames(t, s)

	raw, err := os.ReadFile("../deploy/grafana/kvindex.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var exprs []string
	dashboardExprs(dash, &exprs)
	if len(exprs) < 10 {
		t.Fatalf("dashboard has %d expressions; the walk is broken or the dashboard lost its panels", len(exprs))
	}
	refs := map[string][]string{} // metric → where it is referenced
	for _, e := range exprs {
		for _, m := range metricRe.FindAllString(e, -1) {
			refs[m] = append(refs[m], "dashboard: "+e)
		}
	}

	raw, err = os.ReadFile("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alerts YAML: %v", err)
	}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts++
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("group %s: rule %+v lacks alert, expr, labels.severity or annotations.summary", g.Name, r)
			}
			for _, m := range metricRe.FindAllString(r.Expr, -1) {
				refs[m] = append(refs[m], "alert "+r.Alert+": "+r.Expr)
			}
		}
	}
	if alerts < 7 {
		t.Fatalf("%d alert rules, want the seven of issue 16 at least", alerts)
	}
	for _, want := range []string{"kvindex_store_failed", "kvindex_gaps_total", "kvindex_recovery_fetches_total", "kvindex_zmq_seconds_since_last_event", "kvindex_ready", "kvindex_store_bytes"} {
		if len(refs[want]) == 0 {
			t.Errorf("nothing references %s", want)
		}
	}

	var missing []string
	for m, where := range refs {
		if !exported(names, m) {
			missing = append(missing, m+" (in "+where[0]+")")
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("referenced but not exported:\n  %s", strings.Join(missing, "\n  "))
	}
}
