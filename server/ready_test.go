package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestNotReadyUntilReplayed: between Open and the end of Recover, /readyz and every /v1 route
// answer 503 with the replay status; /healthz, /metrics and the status page answer 200.
// Afterwards all is served.
func TestNotReadyUntilReplayed(t *testing.T) {
	dir := t.TempDir()
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := Open(Config{DataDir: dir, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	get := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ev := `[{"worker_id":1,"event":{"event_id":1,"data":{"stored":{"blocks":[{"block_hash":1,"tokens_hash":2}]}}}}]`
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/readyz", ""}, {"POST", "/v1/events", ev}, {"POST", "/v1/find_matches", `{"block_hashes":[2]}`},
		{"GET", "/v1/ranks", ""}, {"GET", "/v1/dump", ""}, {"POST", "/v1/flush", ""},
		{"GET", "/health", ""}, // Dynamo's readiness: its port is bound after recovery (docs/CONTRACT.md §9)
	} {
		if code, body := get(c.method, c.path, c.body); code != 503 || !strings.Contains(body, `"error"`) {
			t.Fatalf("%s %s before the replay: %d %s", c.method, c.path, code, body)
		}
	}
	for _, p := range []string{"/healthz", "/metrics", "/"} {
		if code, _ := get("GET", p, ""); code != 200 {
			t.Fatalf("%s before the replay: %d", p, code)
		}
	}
	if err := s.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if code, _ := get("GET", "/readyz", ""); code != 200 {
		t.Fatalf("/readyz after the replay: %d", code)
	}
	if code, body := get("POST", "/v1/events", ev); code != 200 || !strings.Contains(body, `"accepted":1`) {
		t.Fatalf("events after the replay: %d %s", code, body)
	}
	if _, body := get("GET", "/metrics", ""); !strings.Contains(body, "kvindex_ready 1") || !strings.Contains(body, `kvindex_events_applied_total{event_type="stored",model="default",routing_group="default",status="ok"} 1`) {
		t.Fatalf("metrics after the replay lack readiness or counts")
	}
}
