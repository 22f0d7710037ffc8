package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvindex/kvindex/wal"
)

// syncBuf is a strings.Builder safe for the server's concurrent log writes.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStartLogs checks the rules "Run logs its effective settings once at start" and "durations
// in log lines carry their unit in the key (replay_ms), never a Go duration string".
func TestStartLogs(t *testing.T) {
	var logs syncBuf
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ln, _ := localListener(t)
	go func() {
		done <- Run(ctx, Config{DataDir: filepath.Join(t.TempDir(), "data"), Listener: ln, Durability: wal.NoSync,
			Lanes: 1, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "msg=ready") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if n := strings.Count(out, "msg=listening"); n != 1 {
		t.Fatalf("settings logged %d times, want once:\n%s", n, out)
	}
	for _, key := range []string{"data_dir=", "durability=none", "lanes=1", "auth=false", "version=", "fetch_timeout_ms="} {
		if !strings.Contains(out, key) {
			t.Errorf("start log lacks %s:\n%s", key, out)
		}
	}
	if !regexp.MustCompile(`msg=ready .*replay_ms=\d+`).MatchString(out) {
		t.Errorf("ready line without replay_ms:\n%s", out)
	}
	// A Go duration string looks like 1.5ms, 2s, 1m0s, 350µs.
	if m := regexp.MustCompile(`=\d+(\.\d+)?(ns|µs|us|ms|s|m\d+s|h\d+m)\b`).FindString(out); m != "" {
		t.Errorf("a duration without a unit key (%s) in:\n%s", m, out)
	}
}
