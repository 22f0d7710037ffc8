package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var (
	// alertSelectorRe finds a kvindex series selector in PromQL or prose: a name and its matchers.
	alertSelectorRe = regexp.MustCompile(`\b(kvindex_[a-zA-Z0-9_]+)(\{([^}]*)\})?`)
	alertMatcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	// scrapeLineRe is one sample line of the Prometheus text format.
	scrapeLineRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? \S+$`)
	scrapeLabel  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

type series struct {
	name   string
	labels map[string]string
}

// fromFirstWorker are the families whose series are per source kind of a partition's workers:
// they exist at 0 from a worker's first event (before which no outcome can be reported), not on
// a server that has none.
var fromFirstWorker = map[string]bool{"kvindex_outcomes_total": true, "kvindex_overpredictions_total": true}

// TestShippedAlertsSelectSeriesThatExist checks the rule "every series a shipped alert selects
// (in its expression or named in its text) is exported by a fresh server with one source,
// before anything happened" (the accuracy families: once a worker sent its first event): a
// counter that appears only with its first error never makes an increase() alert fire, and a
// gauge that is absent never fires at all (a ZMQ source that never delivers is the silent
// source KvindexSourceSilent is for).
func TestShippedAlertsSelectSeriesThatExist(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}

	// A source whose publisher is not there (a wrong port): it never delivers an event.
	p := start(t, t.TempDir(), "--zmq", "tcp://"+freeAddr(t))
	p.waitReady()
	fresh := scrapeSeries(t, p)
	if code, body := p.do("POST", "/v1/events", "", []byte(`[{"worker_id":7,"event":{"event_id":1,"data":"cleared"}}]`)); code != 200 {
		t.Fatalf("POST /v1/events: %d %s", code, body)
	}
	withWorker := scrapeSeries(t, p)

	checked := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			texts := []string{r.Expr, r.Annotations["description"]}
			for _, text := range texts {
				for _, sel := range alertSelectorRe.FindAllStringSubmatch(text, -1) {
					checked++
					if fromFirstWorker[sel[1]] {
						if !anySeriesMatches(t, withWorker, sel[1], sel[3]) {
							t.Errorf("alert %s selects %s, which a server with one worker does not export", r.Alert, sel[0])
						}
					} else if !anySeriesMatches(t, fresh, sel[1], sel[3]) {
						t.Errorf("alert %s selects %s, which a fresh server with one source does not export", r.Alert, sel[0])
					}
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("%d selectors checked; the rule file lost its rules or the parse is broken", checked)
	}
}

// scrapeSeries reads p's /metrics.
func scrapeSeries(t *testing.T, p *proc) []series {
	t.Helper()
	code, body := p.do("GET", "/metrics", "", nil)
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	var scraped []series
	for _, line := range strings.Split(string(body), "\n") {
		m := scrapeLineRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := series{name: m[1], labels: map[string]string{}}
		for _, l := range scrapeLabel.FindAllStringSubmatch(m[3], -1) {
			s.labels[l[1]] = l[2]
		}
		scraped = append(scraped, s)
	}
	return scraped
}

// anySeriesMatches reports whether a scraped series has the name (a histogram's _bucket, _sum and
// _count included) and satisfies the PromQL matchers.
func anySeriesMatches(t *testing.T, scraped []series, name, matchers string) bool {
	for _, s := range scraped {
		if s.name != name {
			continue
		}
		ok := true
		for _, m := range alertMatcherRe.FindAllStringSubmatch(matchers, -1) {
			v := s.labels[m[1]]
			switch m[2] {
			case "=":
				ok = ok && v == m[3]
			case "!=":
				ok = ok && v != m[3]
			case "=~", "!~":
				re, err := regexp.Compile("^(?:" + m[3] + ")$")
				if err != nil {
					t.Fatalf("matcher %s: %v", m[0], err)
				}
				ok = ok && re.MatchString(v) == (m[2] == "=~")
			}
		}
		if ok {
			return true
		}
	}
	return false
}
