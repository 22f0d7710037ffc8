package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/kvindex/kvindex/engine"
)

// goName matches what only Go code names: a camelCase identifier (answerShape, findRequest), a
// package-qualified name (main.x, engine.Batch), a Go type (struct, map[, []uint64, uint32, …)
// or encoding/json's words for one ("Go struct field", "Go value", "into Number"). JSON paths are snake_case and dotted
// (event.data.stored), which none of these match.
var goName = regexp.MustCompile(`\b[a-z]+[A-Z]\w*\b|\b[a-z]+\.[A-Z]\w*|\bstruct\b|\bmap\[|\[\][a-zA-Z*]|\b(u?int|float)(8|16|32|64)?\b|\bGo (struct|value)\b|\binterface \{|\binto [A-Z]`)

// jsonFieldNames is every JSON field name a request type of the server or of its sources'
// configurations declares (the json tags of their Go files).
func jsonFieldNames(t *testing.T) []string {
	t.Helper()
	tag := regexp.MustCompile("json:\"([a-z_]+)")
	seen := map[string]bool{}
	for _, glob := range []string{"*.go", "../natsrc/*.go", "../vllm/*.go", "../event/*.go"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tag.FindAllSubmatch(b, -1) {
				seen[string(m[1])] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// validBodies are bodies that pass decoding and validation on the routes whose success starts
// nothing (no listener, no fetch): with one of their fields replaced, the answer is the one of
// the checks after decoding.
var validBodies = map[string]string{
	"POST /v1/find_matches":             `{"block_hashes":[1]}`,
	"POST /v1/find_matches_for_request": `{"tokens":[1,2,3,4]}`,
	"POST /v1/routing_decisions":        `{"worker_id":40,"block_hashes":[1]}`,
	"PUT /v1/workers/{worker_id}/lease": `{"ttl_ms":1000}`,
	"POST /v1/outcomes":                 `{"worker_id":7,"cached_tokens":0,"block_hashes":[1]}`,
	"POST /query":                       `{"token_ids":[1,2,3,4],"model_name":"default"}`,
	"POST /query_by_hash":               `{"block_hashes":[1],"model_name":"default"}`,
}

// withField is the JSON object valid with its field f set to the JSON value v.
func withField(t *testing.T, valid, f, v string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(valid), &m); err != nil {
		t.Fatal(err)
	}
	m[f] = json.RawMessage(v)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestJSONErrorsNameNoGoType checks the rule "an error answer names the JSON field and what was
// expected, never a Go type": every route that reads a body is sent, for every JSON field name
// the code declares, that field with a value of each wrong type — alone, inside an array (the
// shape of batch routes) and within a valid body — and no answer may carry a Go name.
func TestJSONErrorsNameNoGoType(t *testing.T) {
	s, _ := rangeServer(t, Config{}, engine.DumpCacheOptions{})
	h := s.Handler()
	fields := jsonFieldNames(t)
	if len(fields) < 40 {
		t.Fatalf("found %d JSON field names in the sources, want the request types' (40 or more): %v", len(fields), fields)
	}
	wrong := []string{`"x"`, `-1`, `1.5`, `true`, `{}`, `[]`, `["x"]`, `[{}]`, `{"x":1}`, `18446744073709551616`}
	path := strings.NewReplacer("{worker_id}", "7", "{dp_rank}", "0", "{id}", "x")
	routes, answers := 0, 0
	for _, rt := range s.routes() {
		method, pattern, _ := strings.Cut(rt.pattern, " ")
		if method != http.MethodPost && method != http.MethodPut {
			continue
		}
		routes++
		url := path.Replace(pattern)
		for _, f := range fields {
			for _, v := range wrong {
				obj := `{"` + f + `":` + v + `}`
				bodies := []string{obj, "[" + obj + "]"}
				if valid, ok := validBodies[rt.pattern]; ok {
					bodies = append(bodies, withField(t, valid, f, v))
				}
				for _, body := range bodies {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest(method, url, strings.NewReader(body)))
					if rec.Code < 400 {
						continue
					}
					answers++
					if m := goName.FindString(rec.Body.String()); m != "" {
						t.Errorf("%s %s: %d %s: names the Go %q", rt.pattern, body, rec.Code, strings.TrimSpace(rec.Body.String()), m)
					}
				}
			}
		}
	}
	if routes < 15 || answers < 1000 {
		t.Fatalf("%d body routes, %d error answers checked: the test reached too little", routes, answers)
	}
	for pattern := range validBodies {
		if !slices.ContainsFunc(s.routes(), func(rt route) bool { return rt.pattern == pattern }) {
			t.Errorf("validBodies names %s, which is no route", pattern)
		}
	}

	// The message names the field as the client wrote it and what it must be.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/find_matches", strings.NewReader(`{"block_hashes":[1],"top_k":"3"}`)))
	if want := `{"error":"field top_k: JSON string, want an unsigned 64-bit integer"}`; strings.TrimSpace(rec.Body.String()) != want {
		t.Errorf("top_k as a string: %d %s, want 400 %s", rec.Code, rec.Body.String(), want)
	}
}
