package lanes

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// waitFor polls cond until it holds; after timeout it fails the test with what (and what said
// then, as describe tells it, when given).
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool, describe ...func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("%s: still not so after %v", what, timeout)
			for _, d := range describe {
				msg += " (" + d() + ")"
			}
			t.Fatal(msg)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitGroup waits for wg; after timeout it fails the test with what (the goroutines are left
// running: the test is over).
func waitGroup(t testing.TB, wg *sync.WaitGroup, timeout time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("%s: still running after %v", what, timeout)
	}
}
