package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOperatorMessages checks the rule "what an operator reads says what to do, in plain text":
// NDJSON posted as curl -d posts it (newlines stripped) is refused with the fix; the 401 body is
// not JSON-escaped HTML; PUT of a worker's source answers the source as set.
func TestOperatorMessages(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, filepath.Join(dir, "data"), "--auth-token-file", token)
	p.waitReady()
	do := func(method, path, ctype, body string, auth bool) (int, string) {
		t.Helper()
		hdr := map[string]string{}
		if ctype != "" {
			hdr["Content-Type"] = ctype
		}
		if auth {
			hdr["Authorization"] = "Bearer s3cret"
		}
		return p.doHeaders(method, path, hdr, body)
	}

	// curl -d @events.ndjson: the lines glued together, as a form.
	line := `{"worker_id":7,"event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":1,"tokens_hash":1}]}}}}`
	code, body := do("POST", "/v1/events", "application/x-www-form-urlencoded", line+line, true)
	if code != 400 || !strings.Contains(body, "--data-binary") || !strings.Contains(body, "application/x-ndjson") {
		t.Errorf("NDJSON posted as curl -d: %d %s, want a 400 that names --data-binary and application/x-ndjson", code, body)
	}
	if code, body := do("POST", "/v1/events", "application/x-ndjson", line+"\n"+strings.Replace(line, `"event_id":1`, `"event_id":2`, 1)+"\n", true); code != 200 {
		t.Errorf("the same as NDJSON: %d %s", code, body)
	}

	code, body = do("POST", "/v1/events", "", "[]", false)
	if code != 401 || !strings.Contains(body, "Bearer <token>") {
		t.Errorf("without the token: %d %s, want 401 naming Bearer <token> as written", code, body)
	}

	code, body = do("PUT", "/v1/workers/7/source", "", `{"url":"http://127.0.0.1:1/"}`, true)
	if want := `{"url":"http://127.0.0.1:1","worker_id":7}`; code != 200 || strings.TrimSpace(body) != want {
		t.Errorf("PUT a worker's source: %d %s, want 200 %s", code, body, want)
	}
}

// doHeaders sends a request with the given headers and returns the status and body.
func (p *proc) doHeaders(method, path string, hdr map[string]string, body string) (int, string) {
	p.t.Helper()
	req, err := http.NewRequest(method, p.base+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
