package server

import (
	"net/http"

	"github.com/kvindex/kvindex/openapi"
)

// openAPI answers GET /openapi.json: the OpenAPI 3.1 document of this API (package openapi),
// served before the replay is done too, so a client can be generated from a starting server.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	b, err := openapi.JSON()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
