package engine

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/wal"
)

// Rank names one (partition, worker, dp rank).
type Rank = event.Rank

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

// RecoverySources returns the --upstream default and a copy of the per-worker sources.
func (e *Engine) RecoverySources() (def string, byWorker map[uint64]string) {
	s := e.srcs
	s.mu.RLock()
	defer s.mu.RUnlock()
	byWorker = make(map[uint64]string, len(s.byWorker))
	for w, u := range s.byWorker {
		byWorker[w] = u
	}
	return s.def, byWorker
}

// CheckSourceURL refuses a recovery source that is not an absolute http(s) URL.
func CheckSourceURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("source url %q must be an absolute http(s) URL like http://host:7070", raw)
	}
	return nil
}

// SetRecoverySource sets (u != "") or clears (u == "") the worker's own recovery source,
// durably, and lets its ranks' recovery use it at once. It returns the URL as kept (trimmed).
func (e *Engine) SetRecoverySource(ctx context.Context, worker uint64, u string) (string, error) {
	if u != "" {
		if err := CheckSourceURL(u); err != nil {
			return "", err
		}
		u = trimURL(u)
	}
	name := sourceMetaPrefix + strconv.FormatUint(worker, 10)
	if err := e.CommitMeta(ctx, func(b MetaBatch) {
		if u == "" {
			b.DeleteMeta(name)
		} else {
			b.SetMeta(name, []byte(u))
		}
	}); err != nil {
		return "", err
	}
	e.srcs.mu.Lock()
	if u == "" {
		delete(e.srcs.byWorker, worker)
	} else {
		e.srcs.byWorker[worker] = u
	}
	e.srcs.mu.Unlock()
	if err := e.pipe.SourceChanged(ctx, worker); err != nil {
		return "", err
	}
	if u != "" {
		e.lg.Info("recovery source set", "worker_id", worker, "url", u)
	}
	return u, nil
}
