package server

import (
	"net/http"

	"github.com/kvindex/kvindex/engine"
)

// PUT /v1/workers/{id}/source and DELETE: a worker's own recovery source, kept by the engine
// (Engine.SetRecoverySource) in the log's global metadata.

func (s *Server) putSource(w http.ResponseWriter, r *http.Request) {
	wid, ok := pathWorker(w, r)
	if !ok {
		return
	}
	body, _, ok := s.readBody(w, r, bodyJSON)
	if !ok {
		return
	}
	var req struct {
		URL *string `json:"url"`
	}
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.URL == nil {
		writeError(w, http.StatusBadRequest, "missing field url")
		return
	}
	if *req.URL == "" {
		writeError(w, http.StatusBadRequest, "field url is empty (DELETE /v1/workers/{id}/source removes a source)")
		return
	}
	if err := checkSourceURL(*req.URL); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	u, err := s.e.SetRecoverySource(r.Context(), wid, *req.URL)
	if err != nil {
		s.submitError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"worker_id": wid, "url": u}) // the source as set
}

func (s *Server) deleteSource(w http.ResponseWriter, r *http.Request) {
	wid, ok := pathWorker(w, r)
	if !ok {
		return
	}
	if _, err := s.e.SetRecoverySource(r.Context(), wid, ""); err != nil {
		s.submitError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// checkSourceURL refuses a URL that is not an absolute http(s) URL.
func checkSourceURL(raw string) error { return engine.CheckSourceURL(raw) }
