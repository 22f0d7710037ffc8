package engine

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/groupgate"
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
	kinds    map[uint64]Source // the kind of door that last fed each worker (persisted: kindMetaPrefix)
}

// kindMetaPrefix names the workers' source kinds in the log's global metadata:
// "wsource/<worker_id>" → the Source as UTF-8 bytes. Written when a worker's kind changes (with
// the events of the ingest door, by a metadata commit of its own for the event sources'
// placement), deleted with the worker.
const kindMetaPrefix = "wsource/"

func loadSources(lg *wal.Log, def string) (*sources, error) {
	s := &sources{def: strings.TrimRight(def, "/"), byWorker: map[uint64]string{}, kinds: map[uint64]Source{}}
	if err := loadWorkerMetas(lg, sourceMetaPrefix, func(w uint64, v []byte) { s.byWorker[w] = string(v) }); err != nil {
		return nil, fmt.Errorf("loading recovery sources: %w", err)
	}
	if err := loadWorkerMetas(lg, kindMetaPrefix, func(w uint64, v []byte) { s.kinds[w] = Source(v) }); err != nil {
		return nil, fmt.Errorf("loading the workers' source kinds: %w", err)
	}
	return s, nil
}

// loadWorkerMetas calls fn with every per-worker entry "<prefix><worker_id>" of the log's
// global metadata (an entry whose name is not a worker id is skipped).
func loadWorkerMetas(lg *wal.Log, prefix string, fn func(worker uint64, v []byte)) error {
	m, err := lg.Metas(prefix)
	if err != nil {
		return err
	}
	for k, v := range m {
		if w, err := strconv.ParseUint(strings.TrimPrefix(k, prefix), 10, 64); err == nil {
			fn(w, v)
		}
	}
	return nil
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

// Source is the kind of door that feeds a worker's ranks: accuracy is kept per partition and
// source kind (accuracy.go), and the event sources' doors (SourceDoor) renew source-implied
// leases (lease.go).
type Source string

// The source kinds. A worker's kind is the door its latest events came through, kept across
// restarts (SourceUnknown: none yet); routing decisions name a worker only when no event door
// did.
const (
	SourceUnknown   Source = "unknown"
	SourceLibrary   Source = "library"   // the Go library (and the benchmark): Ingest, IngestSized, Place
	SourceHTTP      Source = "http"      // POST /v1/events
	SourceZMQ       Source = "zmq"       // a vLLM ZMQ source (--zmq, POST /v1/sources)
	SourceDynamo    Source = "dynamo"    // a ZMQ source of Dynamo's /register
	SourceNATS      Source = "nats"      // a NATS Core or JetStream source
	SourcePeer      Source = "peer"      // a peer's dump (--peers bootstrap)
	SourceDecisions Source = "decisions" // routing decisions only (approximate mode)
)

// noteSource records src as worker's kind and reports whether it changed (then its metadata
// entry is due). A routing decision (SourceDecisions) names only a worker no event door fed.
func (e *Engine) noteSource(worker uint64, src Source) bool {
	s := e.srcs
	s.mu.RLock()
	have, ok := s.kinds[worker]
	s.mu.RUnlock()
	if have == src || (ok && src == SourceDecisions) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if have, ok := s.kinds[worker]; have == src || (ok && src == SourceDecisions) {
		return false
	}
	s.kinds[worker] = src
	return true
}

func kindMeta(worker uint64, src Source) Meta {
	return Meta{Name: kindMetaPrefix + strconv.FormatUint(worker, 10), Value: []byte(src)}
}

// noteSources records src for the workers of evs and returns the metadata entries of the kinds
// that changed, for the log batch of the events.
func (e *Engine) noteSources(evs []event.RouterEvent, src Source) []Meta {
	var meta []Meta
	last, first := uint64(0), true
	for i := range evs {
		if w := evs[i].WorkerID; first || w != last {
			if e.noteSource(w, src) {
				meta = append(meta, kindMeta(w, src))
			}
			last, first = w, false
		}
	}
	return meta
}

// forgetWorkerMeta drops what the engine kept of a removed worker's doors, in one commit: its
// source kind and its source's indexed group kinds (a source still running sets them again with
// its next batch; back through another door, the worker follows its partition's setting).
func (e *Engine) forgetWorkerMeta(ctx context.Context, worker uint64) error {
	s := e.srcs
	s.mu.RLock()
	_, hadKind := s.kinds[worker]
	s.mu.RUnlock()
	_, hadGroups := e.kinds.Worker(worker)
	if !hadKind && !hadGroups {
		return nil
	}
	id := strconv.FormatUint(worker, 10)
	if err := e.CommitMeta(ctx, func(b MetaBatch) {
		if hadKind {
			b.DeleteMeta(kindMetaPrefix + id)
		}
		if hadGroups {
			b.DeleteMeta(groupgate.MetaPrefix + id)
		}
	}); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.kinds, worker)
	s.mu.Unlock()
	e.kinds.SetWorker(worker, 0)
	return nil
}

// SourceOf is the kind of door that last fed worker (SourceUnknown: none).
func (e *Engine) SourceOf(worker uint64) Source {
	s := e.srcs
	s.mu.RLock()
	defer s.mu.RUnlock()
	if k, ok := s.kinds[worker]; ok {
		return k
	}
	return SourceUnknown
}

// SourceDoor is the door of an event source (the vLLM ZMQ and NATS source managers' sink): the
// engine's SubmitWithMeta, which also renews the source-implied lease of each worker it
// delivers events for (Config.SourceLease; lease.go). Every other method is the engine's.
type SourceDoor struct {
	*Engine
}

// SourceDoor returns the door the event sources submit through.
func (e *Engine) SourceDoor() SourceDoor { return SourceDoor{e} }

// SubmitWithMeta logs and applies events already placed by Place and writes meta in the
// same log batch; with Config.SourceLease set, the implied leases the events renew are written
// in that batch too (no write of their own).
func (d SourceDoor) SubmitWithMeta(ctx context.Context, evs []event.RouterEvent, meta ...Meta) (Result, error) {
	ctx, release, err := d.Admit(ctx, len(evs), false) // a source waits for its share (admission.go)
	if err != nil {
		return Result{}, err
	}
	defer release()
	return d.submitRenewing(ctx, evs, meta)
}
