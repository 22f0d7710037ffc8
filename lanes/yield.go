package lanes

import "runtime"

// yieldEvery bounds the work a lane does without giving its processor away: the decider (per
// event decided) and the applier (per tree step applied) call runtime.Gosched after this many,
// so that a query goroutine queued behind a batch of up to MaxBatchEvents events runs within one
// chunk (~64 events, tens of µs), not after the whole batch (milliseconds at batch 4096). It
// changes no order: the lane goroutine resumes where it was; the cost is one Gosched per chunk.
const yieldEvery = 64

// yieldAt yields the processor at every yieldEvery-th unit of work n (n > 0).
func yieldAt(n int) {
	if n > 0 && n%yieldEvery == 0 {
		runtime.Gosched()
	}
}
