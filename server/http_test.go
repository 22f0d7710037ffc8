package server

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"github.com/kvindex/kvindex/engine"
	"github.com/vmihailenco/msgpack/v5"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func gz(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// send posts body with the given headers ("Name: value") and returns status, headers and body.
func send(t *testing.T, method, url, body string, headers ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

const oneEvent = `[{"worker_id":7,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}]`

// TestPostBodiesAlike checks the rules "every POST/PUT route with a body takes the same content
// types (JSON, and curl's form type; NDJSON and msgpack on /v1/events), answers 415 for others,
// and decodes gzip Content-Encoding under the same body limit".
func TestPostBodiesAlike(t *testing.T) {
	_, url := rangeServer(t, Config{MaxBodyBytes: 4096}, engine.DumpCacheOptions{})
	bodies := map[string]string{
		"POST /v1/events":                    oneEvent,
		"POST /v1/find_matches":              `{"block_hashes":[2]}`,
		"POST /v1/find_matches_for_request":  `{"tokens":[1,2]}`,
		"PUT /v1/workers/{worker_id}/source": `{"url":"http://127.0.0.1:1"}`,
		"POST /v1/sources":                   `{"endpoint":"tcp://127.0.0.1:1","worker_id":3}`,
	}
	for pattern, body := range bodies {
		method, _, _ := strings.Cut(pattern, " ")
		path := sampleRequests[pattern][0]
		for _, tc := range []struct {
			name    string
			body    string
			headers []string
			want    int
		}{
			{"no content type", body, nil, 200},
			{"json", body, []string{"Content-Type: application/json; charset=utf-8"}, 200},
			{"curl -d", body, []string{"Content-Type: application/x-www-form-urlencoded"}, 200},
			{"gzip", gz(t, body), []string{"Content-Type: application/json", "Content-Encoding: gzip"}, 200},
			{"text/plain", body, []string{"Content-Type: text/plain"}, 415},
			{"xml", body, []string{"Content-Type: application/xml"}, 415},
			{"brotli", body, []string{"Content-Type: application/json", "Content-Encoding: br"}, 415},
			{"not gzip", body, []string{"Content-Encoding: gzip"}, 400},
			{"gzip over the limit decoded", gz(t, strings.Repeat(" ", 8192)+body), []string{"Content-Encoding: gzip"}, 413},
		} {
			t.Run(pattern+"/"+tc.name, func(t *testing.T) {
				if pattern == "POST /v1/sources" && tc.want == 200 {
					// a source is created once; a second one is 409 — any non-415 answer shows the body was read
					tc.want = 0
				}
				code, _, resp := send(t, method, url+path, tc.body, tc.headers...)
				if (tc.want == 0 && (code == 415 || code >= 500 || code == 400)) || (tc.want != 0 && code != tc.want) {
					t.Fatalf("%d %s, want %d", code, resp, tc.want)
				}
				if code >= 400 && !strings.Contains(resp, `"error"`) {
					t.Fatalf("error answer without {\"error\"}: %s", resp)
				}
				if code == http.StatusRequestEntityTooLarge && !strings.Contains(resp, "limit of 4096 bytes (decoded, when gzip-encoded) set by --max-body-bytes") {
					t.Fatalf("413 %s, want it to name the limit and --max-body-bytes", resp)
				}
			})
		}
	}
	if code, _, resp := send(t, "POST", url+"/v1/events", gz(t, `{"worker_id":7,"event":{"event_id":2,"data":"cleared"}}`+"\n"),
		"Content-Type: application/x-ndjson", "Content-Encoding: gzip"); code != 200 {
		t.Fatalf("gzip NDJSON: %d %s", code, resp)
	}
}

// TestMethodNotAllowedHasAllow checks the rule "a path served under other methods answers 405
// with an Allow header listing them; an unknown path is 404".
func TestMethodNotAllowedHasAllow(t *testing.T) {
	_, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/v1/events", "POST"},
		{"PUT", "/v1/sources", "GET, HEAD, POST"},
		{"POST", "/v1/workers/7/source", "PUT, DELETE"},
		{"POST", "/v1/workers/7", "DELETE"},
	} {
		code, hdr, body := send(t, tc.method, url+tc.path, "")
		if code != http.StatusMethodNotAllowed || hdr.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d Allow %q %s, want 405 Allow %q", tc.method, tc.path, code, hdr.Get("Allow"), body, tc.allow)
		}
	}
	if code, _, _ := send(t, "GET", url+"/v1/nothing", ""); code != http.StatusNotFound {
		t.Errorf("unknown path: %d, want 404", code)
	}
}

// TestUnknownFieldsAndDuplicateKeys checks the rules "an unknown field in an event is counted
// (kvindex_unknown_event_fields_total, Server.UnknownFields) and logged once per field name, and the event accepted; with --strict
// it is a 400 naming the field; a duplicate key is a 400 either way".
func TestUnknownFieldsAndDuplicateKeys(t *testing.T) {
	var logs bytes.Buffer
	s, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	s.lg = slog.New(slog.NewTextHandler(&logs, nil))
	withExtra := func(id int) string {
		return `[{"worker_id":7,"extra":1,"event":{"event_id":` + string(rune('0'+id)) +
			`,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2,"mm_extra_info":null},{"block_hash":3,"tokens_hash":4,"mm_extra_info":null}]}}}}]`
	}
	for id := 1; id <= 2; id++ {
		if code, _, body := send(t, "POST", url+"/v1/events", withExtra(id)); code != 200 {
			t.Fatalf("unknown fields, not strict: %d %s", code, body)
		}
	}
	unknownSeries := `kvindex_unknown_event_fields_total{door="http"}`
	if got := scrapeValue(t, url, unknownSeries); got != 6 {
		t.Errorf("%s = %v, want 6 (3 per event)", unknownSeries, got)
	}
	for _, name := range []string{"field=extra", "field=event.data.stored.blocks[].mm_extra_info"} {
		if n := strings.Count(logs.String(), name+" "); n != 1 {
			t.Errorf("%s logged %d times, want once:\n%s", name, n, logs.String())
		}
	}
	dup := `[{"worker_id":7,"event":{"event_id":9,"event_id":10,"data":"cleared"}}]`
	if code, _, body := send(t, "POST", url+"/v1/events", dup); code != 400 || !strings.Contains(body, "duplicate key") || !strings.Contains(body, "event.event_id") {
		t.Errorf("duplicate key: %d %s, want 400 naming event.event_id", code, body)
	}

	_, strictURL := rangeServer(t, Config{Strict: true}, engine.DumpCacheOptions{})
	code, _, body := send(t, "POST", strictURL+"/v1/events", withExtra(1))
	var e struct {
		Error string
		Index *int
	}
	if code != 400 || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, "field extra: unknown field") || e.Index == nil || *e.Index != 0 {
		t.Errorf("strict: %d %s, want 400 naming field extra at index 0", code, body)
	}
	if code, _, body := send(t, "POST", strictURL+"/v1/events", oneEvent); code != 200 {
		t.Errorf("strict, known fields: %d %s", code, body)
	}

	// msgpack bodies alike: counted when not strict, refused (naming the field) under --strict.
	mp, err := msgpack.Marshal([]any{map[string]any{"worker_id": 7, "extra": 1, "event": map[string]any{"event_id": 3, "data": "cleared"}}})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, body := send(t, "POST", url+"/v1/events", string(mp), "Content-Type: application/msgpack"); code != 200 {
		t.Fatalf("msgpack with an unknown field, not strict: %d %s", code, body)
	}
	if got := scrapeValue(t, url, unknownSeries); got != 7 {
		t.Errorf("msgpack: %s = %v, want 7 (one more)", unknownSeries, got)
	}
	if got := s.UnknownFields(); got != 7 {
		t.Errorf("UnknownFields() = %d, want the metric's 7", got)
	}
	code, _, body = send(t, "POST", strictURL+"/v1/events", string(mp), "Content-Type: application/msgpack")
	if code != 400 || !strings.Contains(body, "field extra: unknown field") {
		t.Errorf("strict msgpack: %d %s, want 400 naming field extra", code, body)
	}
}

// TestQueryParametersChecked checks the rule "the range and dump routes answer 400 for a query
// parameter they do not take".
func TestQueryParametersChecked(t *testing.T) {
	_, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	for _, q := range []string{"/v1/dump?worker=7", "/v1/dump?worker_id=7&worker_id=8", "/v1/ranks/7/0/events?from=1"} {
		if code, _, body := send(t, "GET", url+q, ""); code != 400 || !strings.Contains(body, "query parameter") {
			t.Errorf("%s: %d %s, want 400", q, code, body)
		}
	}
	if code, _, body := send(t, "GET", url+"/v1/dump?worker_id=7", ""); code != 200 {
		t.Errorf("dump with a known parameter: %d %s", code, body)
	}
}

// TestErrorTextsPlain checks the rule "error answers name the API's types, not Go's, and carry no
// doubled prefix".
func TestErrorTextsPlain(t *testing.T) {
	_, url := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	for _, tc := range []struct{ path, body string }{
		{"/v1/find_matches", `{"block_hashes":"x"}`},
		{"/v1/find_matches", `{"block_hashes":[-1]}`},
		{"/v1/find_matches_for_request", `{"tokens":[1.5]}`},
		{"/v1/events", `[{"worker_id":1,"event":5}]`},
		{"/v1/events", `[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":{}}}}}]`},
		{"/v1/events", `{`},
		{"/v1/events", `{}`},
	} {
		code, _, body := send(t, "POST", url+tc.path, tc.body)
		if code != 400 {
			t.Errorf("%s %s: %d %s, want 400", tc.path, tc.body, code, body)
			continue
		}
		for _, bad := range []string{"uint", "[]", "struct", "json.", "Go ", "main.", "*", "field ."} {
			if strings.Contains(body, bad) {
				t.Errorf("%s %s: answer %s contains %q", tc.path, tc.body, body, bad)
			}
		}
		var e struct{ Error string }
		_ = json.Unmarshal([]byte(body), &e)
		if w := strings.Fields(e.Error); len(w) > 1 && w[0] == w[1] {
			t.Errorf("doubled prefix in %q", e.Error)
		}
		if strings.Count(e.Error, "malformed") > 1 || strings.Contains(e.Error, "json: ") {
			t.Errorf("doubled or Go-library prefix in %q", e.Error)
		}
	}
}
