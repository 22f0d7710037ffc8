package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// A failed store: after a fatal store error (a failed WAL write or sync, ENOSPC: wal.ErrFailed,
// store.ErrFatal) every later commit fails until the store is reopened, and nothing in the
// process reopens it. So the server says so everywhere an operator or an orchestrator looks:
// /healthz and /readyz answer 503 naming the cause (a supervisor restarts the process, a load
// balancer stops sending it events), every mutating route answers 503 with the same error,
// kvindex_store_failed is 1 and the status page shows a banner. Reads (find_matches, ranks,
// range route, dump, sources) are still served from the index and the log: what was
// acknowledged before the failure is durable and the next start replays it.

// ErrStoreFailed marks the answers of a server whose store failed; the cause is wrapped after it.
var ErrStoreFailed = errors.New("store failed")

// storeCause returns the error that stopped writes, or nil while the store accepts them: the
// log's fatal error (hit by any commit, a lane's or a direct one such as PUT
// /v1/workers/{id}/source), else a lane's first failed commit (a lane refuses writes after any
// failed commit). Once non-nil it stays so until the process restarts.
func (s *Server) storeCause() error {
	if err := s.log.Err(); err != nil {
		return err
	}
	return s.pipe.Failure()
}

// storeFailure is storeCause as the answers state it: wrapping ErrStoreFailed, saying what to do.
// The first time it finds a failure it logs what the server now answers and drains the lanes.
func (s *Server) storeFailure() error {
	cause := s.storeCause()
	if cause == nil {
		return nil
	}
	err := fmt.Errorf("%w (writes are refused until kvindex is restarted): %w", ErrStoreFailed, cause)
	s.failSeen.Do(func() {
		s.lg.Error("store failed: /healthz and /readyz answer 503 and writes are refused until kvindex is restarted; reads are still served",
			"err", cause)
		// Each lane rolls the ranks of its failed batches back to their last durable cursor by
		// itself, right after the failed commit (lanes: markFailed wakes the decider). The
		// barrier only waits for that, so that this answer and every later read list no id
		// that was never acknowledged.
		ctx, cancel := context.WithTimeout(context.Background(), failureDrainTimeout)
		defer cancel()
		if ferr := s.pipe.Flush(ctx); ferr != nil {
			s.lg.Warn("store failed: draining the lanes", "err", ferr)
		}
	})
	return err
}

// failureDrainTimeout bounds the barrier storeFailure runs when it first sees a failure.
const failureDrainTimeout = 5 * time.Second

// healthz answers 200 while the process serves, 503 once its store failed (only a restart
// reopens it).
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if err := s.storeFailure(); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
