package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

// The access log (`serve --access-log FILE`, docs/CONTRACT.md §9): one JSON line per answered request in
// Dynamo's standalone-indexer shape {trace_id, method, path, model, status, ts, duration_ms},
// the trace id read from Config.TraceIDHeader (default x-trace-id) and the model from the
// model_name query parameter or, on the Dynamo routes, the body's model_name. POST /reopen_logs
// reopens the file (after logrotate moved it).

// DefaultTraceIDHeader is the default of Config.TraceIDHeader (Dynamo's --trace-id-header).
const DefaultTraceIDHeader = "x-trace-id"

type accessLog struct {
	path   string
	header string
	mu     sync.Mutex
	f      *os.File
}

func openAccessLog(path, header string) (*accessLog, error) {
	a := &accessLog{path: path, header: header}
	if err := a.reopen(); err != nil {
		return nil, err
	}
	return a, nil
}

// reopen closes the file and opens path again (appending, created when missing).
func (a *accessLog) reopen() error {
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("access log: %w", err)
	}
	a.mu.Lock()
	old := a.f
	a.f = f
	a.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return nil
}

func (a *accessLog) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}

type accessLine struct {
	TraceID    string  `json:"trace_id"`
	Method     string  `json:"method"`
	Path       string  `json:"path"`
	Model      string  `json:"model"`
	Status     int     `json:"status"`
	TS         string  `json:"ts"`
	DurationMS float64 `json:"duration_ms"`
}

// write appends the line of one answered request.
func (a *accessLog) write(r *http.Request, model string, code int, start time.Time) {
	if model == "" {
		model = r.URL.Query().Get("model_name")
	}
	b, err := json.Marshal(accessLine{TraceID: r.Header.Get(a.header), Method: r.Method, Path: r.URL.Path, Model: model,
		Status: code, TS: start.UTC().Format(time.RFC3339Nano), DurationMS: float64(time.Since(start).Microseconds()) / 1000})
	if err != nil {
		return
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil {
		_, _ = a.f.Write(b)
	}
}

// accessModel is where a Dynamo route's handler leaves the body's model_name for the access
// log (a pointer in the request's context, set by wrap when an access log is written).
type accessModelKey struct{}

// noteModel records the model_name of a Dynamo request body for the access log.
func noteModel(r *http.Request, body []byte) {
	p, _ := r.Context().Value(accessModelKey{}).(*string)
	if p == nil || !bytes.Contains(body, []byte(`"model_name"`)) {
		return
	}
	var v struct {
		ModelName string `json:"model_name"`
	}
	if json.Unmarshal(body, &v) == nil {
		*p = v.ModelName
	}
}

// postReopenLogs is Dynamo's POST /reopen_logs: 200 {"status":"ok"}, the access log reopened
// when one is written.
func (s *Server) postReopenLogs(w http.ResponseWriter, r *http.Request) {
	if s.alog != nil {
		if err := s.alog.reopen(); err != nil {
			s.lg.Error("reopening the access log", "err", err)
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		s.lg.Info("access log reopened", "path", s.alog.path)
	}
	writeJSON(w, http.StatusOK, statusOK)
}

// health is Dynamo's GET /health: 200 only once the index is ready (Dynamo binds its port after
// peer recovery, so its clients wait for /health), 503 before and on a failed store. /healthz
// stays kvindex's liveness probe.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if err := s.storeFailure(); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if !s.ready.Load() {
		writeError(w, http.StatusServiceUnavailable, s.status.Load().(string))
		return
	}
	writeJSON(w, http.StatusOK, statusOK)
}
