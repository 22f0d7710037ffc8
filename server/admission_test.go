package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex/engine"
)

// TestEventsBeyondIngestBound: with the engine's ingest bound full and no wait (IngestWait
// negative, `--ingest-wait 0`), POST /v1/events is answered 429 with Retry-After and an error
// naming the flags, writes nothing and is counted in /metrics; queries are not bound; once the
// slot frees the same body is accepted.
func TestEventsBeyondIngestBound(t *testing.T) {
	s, url := rangeServer(t, Config{MaxIngestInFlight: 1, IngestWait: -1}, engine.DumpCacheOptions{})
	_, release, err := s.e.Admit(context.Background(), 1, true)
	if err != nil {
		t.Fatal(err)
	}
	code, h, body := send(t, "POST", url+"/v1/events", oneEvent)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") != "1" {
		t.Fatalf("events beyond the bound: %d, Retry-After %q, %s; want 429 with Retry-After 1", code, h.Get("Retry-After"), body)
	}
	for _, want := range []string{"--max-ingest-inflight", "retry later"} {
		if !strings.Contains(body, want) {
			t.Errorf("the 429's error %s does not say %q", body, want)
		}
	}
	if code, _, body := send(t, "POST", url+"/v1/find_matches", `{"block_hashes":[2]}`); code != http.StatusOK || !strings.Contains(body, `"scores":[]`) {
		t.Fatalf("find_matches with the ingest bound full: %d %s (want 200, nothing written)", code, body)
	}
	_, _, m := send(t, "GET", url+"/metrics", "")
	for _, want := range []string{"kvindex_ingest_rejected_total 1\n", "kvindex_ingest_inflight 1\n", "kvindex_ingest_inflight_bound 1\n"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
	release()
	if code, _, body := send(t, "POST", url+"/v1/events", oneEvent); code != http.StatusOK {
		t.Fatalf("events after the slot freed: %d %s", code, body)
	}
	if code, _, body := send(t, "POST", url+"/v1/find_matches", `{"block_hashes":[2]}`); code != http.StatusOK || !strings.Contains(body, `"score":1`) {
		t.Fatalf("find_matches after the write: %d %s", code, body)
	}
}

// TestEventsWaitForIngestSlot: with a wait (the default behaviour), a write beyond the bound
// waits for the slot instead of being refused, and is counted as a wait.
func TestEventsWaitForIngestSlot(t *testing.T) {
	s, url := rangeServer(t, Config{MaxIngestInFlight: 1, IngestWait: time.Hour}, engine.DumpCacheOptions{})
	_, release, err := s.e.Admit(context.Background(), 1, true)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() { // no t.Fatal off the test's goroutine: a failed request answers 0
		resp, err := http.Post(url+"/v1/events", "application/json", strings.NewReader(oneEvent))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.e.AdmissionStats().Waiting != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the write never waited for the slot: %+v", s.e.AdmissionStats())
		}
		time.Sleep(time.Millisecond)
	}
	release()
	select {
	case code := <-done:
		if code != http.StatusOK {
			t.Fatalf("the waiting write: %d, want 200", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting write was not answered after the slot freed")
	}
	if st := s.e.AdmissionStats(); st.Rejected != 0 || st.Waited != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestRetryAfterIsTheIngestWait: a 429's Retry-After is the wait the batch was given
// (--ingest-wait), in whole seconds rounded up, at least 1.
func TestRetryAfterIsTheIngestWait(t *testing.T) {
	for _, tc := range []struct {
		wait time.Duration
		want string
	}{{-1, "1"}, {300 * time.Millisecond, "1"}, {2500 * time.Millisecond, "3"}, {10 * time.Second, "10"}} {
		s, _ := rangeServer(t, Config{MaxIngestInFlight: 1, IngestWait: tc.wait}, engine.DumpCacheOptions{})
		if got := s.retryAfter(); got != tc.want {
			t.Errorf("--ingest-wait %v: Retry-After %q, want %q", tc.wait, got, tc.want)
		}
	}
}

// TestRefusedWriteIsNotAnswered429: a write the engine would refuse is answered with its own
// status even while the ingest bound is full (no wait): a worker of another partition is 409,
// not 429 (which a client retries, for ever).
func TestRefusedWriteIsNotAnswered429(t *testing.T) {
	s, url := rangeServer(t, Config{MaxIngestInFlight: 1, IngestWait: -1}, engine.DumpCacheOptions{})
	if code, _, body := send(t, "POST", url+"/v1/events?model_name=a", oneEvent); code != http.StatusOK {
		t.Fatalf("events into partition a: %d %s", code, body)
	}
	_, release, err := s.e.Admit(context.Background(), 1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if code, _, body := send(t, "POST", url+"/v1/events", oneEvent); code != http.StatusConflict || !strings.Contains(body, "partition") {
		t.Fatalf("a worker of partition a posted to the default partition with the bound full: %d %s, want 409", code, body)
	}
	if code, _, body := send(t, "POST", url+"/v1/events?model_name=a", oneEvent); code != http.StatusTooManyRequests {
		t.Fatalf("a write that would be accepted, with the bound full: %d %s, want 429", code, body)
	}
}
