package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAccessLogReopens checks the rules "--access-log writes one JSON line per request in
// Dynamo's shape {trace_id, method, path, model, status, ts, duration_ms}, the trace id from
// --trace-id-header (default x-trace-id), the model from the Dynamo body's model_name; POST
// /reopen_logs answers 200 {\"status\":\"ok\"} and reopens the file, so logrotate can move it".
func TestAccessLogReopens(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	cfg := quietConfig(filepath.Join(dir, "data"))
	cfg.AccessLog = logPath
	_, url, stop := serveConfig(t, cfg)
	defer func() { _ = stop() }()
	req := func(method, path, body, trace string) int {
		t.Helper()
		code, _, _ := send(t, method, url+path, body, "X-Trace-Id: "+trace)
		return code
	}
	if code := req("POST", "/query", `{"token_ids":[1,2,3,4],"model_name":"llama"}`, "t-1"); code != 404 {
		t.Fatalf("/query: %d", code)
	}
	if err := os.Rename(logPath, logPath+".1"); err != nil { // logrotate moves the file
		t.Fatal(err)
	}
	if code := req("POST", "/reopen_logs", "", "t-2"); code != 200 {
		t.Fatalf("/reopen_logs: %d", code)
	}
	if code := req("GET", "/health", "", "t-3"); code != 200 {
		t.Fatalf("/health: %d", code)
	}
	read := func(p string) []accessLine {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var out []accessLine
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var a accessLine
			if err := json.Unmarshal([]byte(l), &a); err != nil {
				t.Fatalf("%s: %q: %v", p, l, err)
			}
			out = append(out, a)
		}
		return out
	}
	old, cur := read(logPath+".1"), read(logPath)
	if len(old) != 1 || old[0].TraceID != "t-1" || old[0].Method != "POST" || old[0].Path != "/query" || old[0].Model != "llama" ||
		old[0].Status != 404 || old[0].TS == "" {
		t.Errorf("the rotated file: %+v, want /query (t-1, llama, 404)", old)
	}
	// /reopen_logs itself is logged once answered, in the new file.
	if len(cur) != 2 || cur[0].TraceID != "t-2" || cur[0].Path != "/reopen_logs" || cur[1].TraceID != "t-3" || cur[1].Path != "/health" || cur[1].Status != 200 {
		t.Errorf("the reopened file: %+v, want /reopen_logs (t-2) then /health (t-3, 200)", cur)
	}
}
