package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLoopBacksOffAndResets checks the rule "the wait doubles after sessions without progress up
// to max, is back to min after one with progress, and nothing runs once ctx ended".
func TestLoopBacksOffAndResets(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	progress := []bool{false, false, false, false, true, false}
	var waits []time.Duration
	n := 0
	Loop(ctx, time.Microsecond, 4*time.Microsecond, func(context.Context) (bool, error) {
		p := progress[n]
		n++
		if n == len(progress) {
			cancel()
		}
		return p, errors.New("session ended")
	}, func(err error, wait time.Duration) {
		if err == nil {
			t.Error("retry without the session's error")
		}
		waits = append(waits, wait)
	})
	want := []time.Duration{1, 2, 4, 4, 1}
	if len(waits) != len(want) {
		t.Fatalf("waits %v, want %v µs (none after ctx ended)", waits, want)
	}
	for i := range want {
		if waits[i] != want[i]*time.Microsecond {
			t.Fatalf("waits %v, want %v µs", waits, want)
		}
	}
}
