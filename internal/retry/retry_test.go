package retry

import (
	"context"
	"errors"
	"slices"
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

// TestReporterRateLimits checks the rule "a source failing the same way logs its first failure,
// then at most one line per Every that counts the ones not logged; a different error logs at
// once".
func TestReporterRateLimits(t *testing.T) {
	r := Reporter{Every: time.Minute}
	t0 := time.Unix(1000, 0)
	dial := errors.New("dial: no such host")
	var logged []int
	for i := 0; i < 30; i++ { // every 5 s for 150 s
		if ok, n := r.Report(t0.Add(time.Duration(i)*5*time.Second), dial); ok {
			logged = append(logged, n)
		}
	}
	if want := []int{0, 11, 11}; !slices.Equal(logged, want) { // at 0 s, 60 s, 120 s
		t.Fatalf("logged with skipped counts %v, want %v", logged, want)
	}
	if ok, n := r.Report(t0.Add(151*time.Second), errors.New("connection refused")); !ok || n != 5 {
		t.Fatalf("a new error: logged %v with %d not logged, want true, 5", ok, n)
	}
}
