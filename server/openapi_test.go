package server

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/openapi"
)

// TestOpenAPICoversEveryRoute checks the rule "every route of the route table is an operation of
// the OpenAPI document, and every operation of the document is a route": a route added to
// routes() without its contract, or a contract for a route that is gone, fails here. It also
// checks that exactly the mutating routes require the bearer token in the document, and that
// GET /openapi.json serves the document.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	s, url := rangeServer(t, Config{Pprof: true}, engine.DumpCacheOptions{})
	b, err := openapi.JSON()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]*openapi3.Operation{} // by "METHOD /path"
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			documented[method+" "+path] = op
		}
	}
	served := map[string]bool{}
	for _, rt := range s.routes() {
		// The mux's "/{$}" (the root only) is the document's "/".
		op := strings.Replace(rt.pattern, "/{$}", "/", 1)
		served[op] = true
		if op == "GET /debug/pprof/" {
			served["GET /debug/pprof/{profile}"] = true // the subtree pattern serves the named profiles
		}
		o := documented[op]
		if o == nil {
			t.Errorf("route %q is not in openapi/openapi.yaml: add its operation (parameters, body, answers, errors)", rt.pattern)
			continue
		}
		// pprof's routes check the token themselves (they change nothing but show internals).
		wantSecured := rt.mutating || strings.HasPrefix(rt.pattern, "GET /debug/pprof/")
		if secured := o.Security != nil && len(*o.Security) > 0; secured != wantSecured {
			t.Errorf("%s: the document says bearer auth %v, want %v", rt.pattern, secured, wantSecured)
		}
	}
	for op := range documented {
		if !served[op] {
			t.Errorf("openapi/openapi.yaml documents %q, which the server does not route", op)
		}
	}
	if len(served) < 30 {
		t.Fatalf("only %d routes listed; the route table is not what this test reads", len(served))
	}

	resp, err := http.Get(url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var v struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatalf("GET /openapi.json is not JSON: %v", err)
	}
	if served := slices.Sorted(maps.Keys(v.Paths)); !strings.HasPrefix(v.OpenAPI, "3.1") || !slices.Equal(served, slices.Sorted(maps.Keys(doc.Paths.Map()))) {
		t.Fatalf("GET /openapi.json serves version %q with paths %v, not the document", v.OpenAPI, served)
	}
}
