// Package retry owns the reconnect loop of kvindex's event sources (vLLM ZMQ, NATS Core and
// JetStream): run a session until the context ends, backing off between sessions.
//
// Invariants: the wait starts at min, doubles after each session that made no progress, never
// exceeds max, and is back to min after a session that did; no wait and no retry callback once
// ctx ended.
package retry

import (
	"context"
	"time"
)

// Loop runs session until ctx ends. When a session returns with ctx still live, Loop calls
// retry(err, wait) (count, record, log) and waits wait before the next session.
func Loop(ctx context.Context, min, max time.Duration, session func(context.Context) (progressed bool, err error), retry func(err error, wait time.Duration)) {
	wait := min
	for ctx.Err() == nil {
		progressed, err := session(ctx)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			wait = min
		}
		retry(err, wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = minDur(2*wait, max)
	}
}

func minDur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}
