package server

import (
	"html"
	"regexp"
	"strings"
	"testing"
)

// TestStatusPageSaysItOnce checks the rule "the replay banner says each thing once: the phase,
// then the counts on the progress line".
func TestStatusPageSaysItOnce(t *testing.T) {
	s, url := serveUnrecovered(t, quietConfig(t.TempDir()))
	s.replayProgress(3, 10, 1234)
	_, page := call(t, "GET", url+"/", "")
	if n := strings.Count(page, "3 of 10 ranks"); n != 1 {
		t.Errorf("the replay's counts appear %d times, want once:\n%s", n, page)
	}
	if !strings.Contains(page, "Not ready — replaying the log. <progress") || !strings.Contains(page, "3 of 10 ranks replayed, 1234 events") {
		t.Errorf("replay banner without its phase and progress:\n%s", page)
	}
}

// TestStatusPageGuides checks the rules "a degraded rank comes with what to do (an upstream,
// or DELETE of the worker)", "the accuracy histogram labels its buckets", "the page writes
// times in RFC 3339 with milliseconds" and "text columns are left-aligned".
func TestStatusPageGuides(t *testing.T) {
	_, url, _, stop := leaseServer(t) // workers 1 and 2 live; the clock at 2026-01-01T00:00:00Z
	defer func() { _ = stop() }()
	_, page := call(t, "GET", url+"/", "")
	if strings.Contains(page, `id="degraded-hint"`) {
		t.Errorf("a hint for degraded ranks while none is")
	}
	for _, step := range []struct{ method, path, body string }{
		{"PUT", "/v1/workers/1/lease", `{"ttl_ms":60000}`},
		{"POST", "/v1/outcomes", `{"worker_id":1,"block_hashes":[10,20],"cached_tokens":16}`},
		{"POST", "/v1/events", `[{"worker_id":3,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":301,"tokens_hash":31}]}}}}]`},
		{"POST", "/v1/events", `[{"worker_id":3,"event":{"event_id":5,"data":{"stored":{"blocks":[{"block_hash":302,"tokens_hash":32}]}}}}]`}, // 2..4 lost: degraded
	} {
		if code, body := call(t, step.method, url+step.path, step.body); code != 200 {
			t.Fatalf("%s %s: %d %s", step.method, step.path, code, body)
		}
	}
	_, page = call(t, "GET", url+"/", "")
	text := html.UnescapeString(page)
	for _, want := range []string{
		`id="degraded-hint"`, "<code>--upstream URL</code>", "<code>PUT /v1/workers/{id}/source</code>", "<code>DELETE /v1/workers/{id}</code>",
		// the lease: expires at the clock + 60 s, removed a --lease-grace (1 min) later
		`<td class="l">2026-01-01T00:01:00.000Z</td><td class="l">2026-01-01T00:02:00.000Z</td>`,
		// every bucket labelled, the exact one marked, each bar titled with its range and count
		`<td>≤−64</td><td>−16</td><td>−8</td><td>−4</td><td>−2</td><td>−1</td><td class="exact">0</td><td>1</td><td>2</td><td>4</td><td>8</td><td>16</td><td>64</td><td>&gt;64</td>`,
		`title="predicted − realized = 0: 0 outcomes"`, `title="predicted − realized from 3 to 4: 0 outcomes"`,
		`<td class="l">default:default</td><td>3</td>`,
	} {
		if !strings.Contains(page, want) && !strings.Contains(text, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	// Two blocks predicted, one realized (cached_tokens 16 at block size 16): the bar of +1.
	if !strings.Contains(text, `title="predicted − realized = 1: 1 outcomes">█</td>`) {
		t.Errorf("the outcome's bar (+1 block) is not full:\n%s", page)
	}
	if m := regexp.MustCompile(`generated (\S+?)[,<]`).FindStringSubmatch(page); m == nil ||
		!regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(m[1]) {
		t.Errorf("generated %v, want RFC 3339 UTC with milliseconds", m)
	}
}
