package server

import (
	"net/http"
	"strings"
	"time"

	"github.com/kvindex/kvindex/statuspage"
)

// statusPage serves the status page (package statuspage), with what only the server knows.
func (s *Server) statusPage(w http.ResponseWriter, r *http.Request) {
	refresh, err := statuspage.ParseRefresh(r.URL.Query().Get("refresh"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	now := time.Now()
	in := statuspage.Input{Engine: s.e, ZMQ: s.zmq, Version: BuildVersion(), DataDir: s.cfg.DataDir, Started: s.start, Now: now,
		Generated: rfc3339(now), Refresh: refresh, Ready: s.ready.Load(), Phase: s.status.Load().(string),
		ReplayDone: int(gaugeValue(s.m.replayRanks)), ReplayTotal: int(gaugeValue(s.m.replayTotal)),
		ReplayEvents: uint64(gaugeValue(s.m.replayEvents)), ReplaySeconds: gaugeValue(s.m.replaySec)}
	if strings.HasPrefix(in.Phase, replayingPrefix) {
		in.Phase = "replaying the log" // its counts are on the progress line
	}
	if rows := s.leaseRows(); len(rows) > 0 {
		in.Leases = rows
	}
	page, err := statuspage.Render(in)
	if err != nil {
		s.lg.Error("rendering the status page", "err", err)
		writeError(w, http.StatusInternalServerError, "rendering the status page failed")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(page)
}
