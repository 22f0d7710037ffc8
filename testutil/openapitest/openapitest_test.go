package openapitest

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestTransportChecksExchanges checks the rules of the package doc against a fake server that
// answers each path as the table says: conforming exchanges pass, and each kind of drift is
// reported naming the route.
func TestTransportChecksExchanges(t *testing.T) {
	answers := map[string]struct {
		code int
		body string
	}{
		"/v1/find_matches": {200, `{"scores":[{"worker_id":18446744073709551615,"dp_rank":0,"score":2,"tree_size":2}]}`},
		"/v1/ranks":        {200, `[{"worker_id":7}]`},                   // required fields missing
		"/v1/flush":        {500, `internal error`},                      // an error that is not the error JSON
		"/healthz":         {200, `{"status":"ok"}`},                     // conforms
		"/readyz":          {200, `{"status":"ready","uptime_s":3}`},     // a field the document lacks
		"/v1/leases":       {201, `{"status":"ok"}`},                     // an undocumented success status
		"/nowhere":         {404, `{"error":"no route GET /nowhere"}`},   // unrouted, answered as an error
		"/v2/ranks":        {200, `[]`},                                  // a route the document lacks
		"/v1/workers/x":    {400, `{"error":"worker_id: not a number"}`}, // refused, and the server refused it too
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answers[r.URL.Path]
		if r.URL.Path == "/v1/find_matches" && strings.Contains(r.Header.Get("X-Test"), "accept-bad") {
			a.code, a.body = 200, `{"scores":[]}`
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.code)
		io.WriteString(w, a.body)
	}))
	defer srv.Close()
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	tr := &Transport{Base: http.DefaultTransport, V: v}
	c := &http.Client{Transport: tr}
	for _, tc := range []struct {
		method, path, body, header string
		want                       string // "" conforms, else a substring of the error
	}{
		{"POST", "/v1/find_matches", `{"block_hashes":[1,2]}`, "", ""},
		{"POST", "/v1/find_matches", gzipped(`{"block_hashes":[1,2]}`), "gzip", ""},
		{"POST", "/v1/find_matches", gzipped(`{"block_hashes":[-1]}`), "gzip accept-bad", "the document refuses the request, the server accepted it"},
		{"POST", "/v1/find_matches", `{"block_hashes":[-1]}`, "accept-bad", "the document refuses the request, the server accepted it"},
		{"GET", "/v1/ranks", "", "", "the answer does not match the document"},
		{"POST", "/v1/flush", "", "", "the answer does not match the document"},
		{"GET", "/healthz", "", "", ""},
		{"GET", "/readyz", "", "", "at '/uptime_s': a field the document does not describe"},
		{"GET", "/v1/leases", "", "", "the answer does not match the document"},
		{"GET", "/nowhere", "", "", ""},
		{"GET", "/v2/ranks", "", "", "the route is not in openapi/openapi.yaml"},
		{"DELETE", "/v1/workers/x", "", "", ""},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		if tc.header != "" {
			req.Header.Set("X-Test", tc.header)
		}
		if strings.Contains(tc.header, "gzip") {
			req.Header.Set("Content-Encoding", "gzip")
		}
		resp, err := c.Do(req)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s %s: %v, want it to conform", tc.method, tc.path, err)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != answers[tc.path].body {
				t.Errorf("%s %s: the caller read %q, want the server's body", tc.method, tc.path, b)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.method+" "+tc.path) {
			t.Errorf("%s %s: error %v, want one naming the route and %q", tc.method, tc.path, err, tc.want)
		}
	}
	if got := len(tr.Violations()); got != 7 {
		t.Errorf("%d violations kept, want 7: %q", got, tr.Violations())
	}
}

func gzipped(s string) string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	return b.String()
}
