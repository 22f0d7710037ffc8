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

// Reporter rate-limits the log line of a retrying source: a source that cannot reach its server
// retries every few seconds forever, and one line per retry buries everything else. It logs the
// first failure, a failure whose message differs from the last one logged, and otherwise at most
// one per Every, saying how many retries it did not log in between. Not safe for concurrent use
// (a source's retry callback runs on its own goroutine).
type Reporter struct {
	Every time.Duration // default DefaultReportEvery

	last    time.Time
	lastErr string
	skipped int
}

// DefaultReportEvery is Reporter's default interval.
const DefaultReportEvery = time.Minute

// Report tells whether to log err now, and how many failures since the last logged one were not.
func (r *Reporter) Report(now time.Time, err error) (log bool, notLogged int) {
	every := r.Every
	if every <= 0 {
		every = DefaultReportEvery
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if !r.last.IsZero() && msg == r.lastErr && now.Sub(r.last) < every {
		r.skipped++
		return false, 0
	}
	notLogged = r.skipped
	r.last, r.lastErr, r.skipped = now, msg, 0
	return true, notLogged
}
