package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/kvindex/kvindex/wal"
)

// sourceMetaPrefix names the per-worker recovery sources in the log's global metadata:
// "source/<worker_id>" → the base URL as UTF-8 bytes.
const sourceMetaPrefix = "source/"

// sources maps workers to their recovery source: a per-worker URL (persisted) or the --upstream
// default.
type sources struct {
	mu       sync.RWMutex
	def      string
	byWorker map[uint64]string
}

func loadSources(lg *wal.Log, def string) (*sources, error) {
	if def != "" {
		if err := checkSourceURL(def); err != nil {
			return nil, fmt.Errorf("--upstream: %w", err)
		}
	}
	s := &sources{def: strings.TrimRight(def, "/"), byWorker: map[uint64]string{}}
	m, err := lg.Metas(sourceMetaPrefix)
	if err != nil {
		return nil, fmt.Errorf("loading recovery sources: %w", err)
	}
	for k, v := range m {
		w, err := strconv.ParseUint(strings.TrimPrefix(k, sourceMetaPrefix), 10, 64)
		if err != nil {
			continue
		}
		s.byWorker[w] = string(v)
	}
	return s, nil
}

func (s *sources) get(worker uint64) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if u, ok := s.byWorker[worker]; ok {
		return u
	}
	return s.def
}

// snapshot returns the --upstream default and a copy of the per-worker sources.
func (s *sources) snapshot() (def string, byWorker map[uint64]string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	byWorker = make(map[uint64]string, len(s.byWorker))
	for w, u := range s.byWorker {
		byWorker[w] = u
	}
	return s.def, byWorker
}

func checkSourceURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("source url %q must be an absolute http(s) URL like http://host:7070", raw)
	}
	return nil
}

func (s *Server) putSource(w http.ResponseWriter, r *http.Request) {
	wid, err := pathU64(r, "worker_id", 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
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
	if err := checkSourceURL(*req.URL); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	u := strings.TrimRight(*req.URL, "/")
	if err := s.commitMeta(r.Context(), func(b *wal.Batch) {
		b.SetMeta(sourceMetaPrefix+strconv.FormatUint(wid, 10), []byte(u))
	}); err != nil {
		s.submitError(w, err)
		return
	}
	s.srcs.mu.Lock()
	s.srcs.byWorker[wid] = u
	s.srcs.mu.Unlock()
	if err := s.pipe.SourceChanged(r.Context(), wid); err != nil {
		s.submitError(w, err)
		return
	}
	s.lg.Info("recovery source set", "worker_id", wid, "url", u)
	writeJSON(w, http.StatusOK, map[string]any{"worker_id": wid, "url": u}) // the source as set
}

func (s *Server) deleteSource(w http.ResponseWriter, r *http.Request) {
	wid, err := pathU64(r, "worker_id", 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.commitMeta(r.Context(), func(b *wal.Batch) {
		b.DeleteMeta(sourceMetaPrefix + strconv.FormatUint(wid, 10))
	}); err != nil {
		s.submitError(w, err)
		return
	}
	s.srcs.mu.Lock()
	delete(s.srcs.byWorker, wid)
	s.srcs.mu.Unlock()
	if err := s.pipe.SourceChanged(r.Context(), wid); err != nil {
		s.submitError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}
