package server

import (
	"net/http"

	"github.com/kvindex/kvindex/engine"
)

// A failed store: after a fatal store error (a failed WAL write or sync, ENOSPC: wal.ErrFailed,
// store.ErrFatal) every later commit fails until the store is reopened, and nothing in the
// process reopens it. So the server says so everywhere an operator or an orchestrator looks:
// /healthz and /readyz answer 503 naming the cause (a supervisor restarts the process, a load
// balancer stops sending it events), every mutating route answers 503 with the same error,
// kvindex_store_failed is 1 and the status page shows a banner. Reads (find_matches, ranks,
// range route, dump, sources) are still served from the index and the log: what was
// acknowledged before the failure is durable and the next start replays it.

// ErrStoreFailed marks the answers of a server whose store failed (engine.ErrStoreFailed).
var ErrStoreFailed = engine.ErrStoreFailed

// storeCause is the engine's StoreCause; storeFailure its StoreFailure.
func (s *Server) storeCause() error   { return s.e.StoreCause() }
func (s *Server) storeFailure() error { return s.e.StoreFailure() }

// healthz answers 200 while the process serves, 503 once its store failed (only a restart
// reopens it).
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if err := s.storeFailure(); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
