package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/kvindex/kvindex/natsrc"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/sources"
	"github.com/kvindex/kvindex/vllm"
)

// GET, POST /v1/sources and DELETE /v1/sources/{id}: the HTTP door of the event sources
// (package sources owns their configs, placement and lifecycle).

// sourceJSON is a ZMQ element of GET /v1/sources.
type sourceJSON struct {
	Kind string `json:"kind"`
	vllm.Status
	Stored bool `json:"stored"` // added with POST /v1/sources (else from --zmq)
	// LastEventAt shadows the status's (RFC 3339 with nanoseconds) in the API's time format;
	// LastBatchAt is the deprecated numeric last_batch_ts in it.
	LastEventAt string `json:"last_event_at,omitempty"`
	LastBatchAt string `json:"last_batch_at,omitempty"`
}

// natsSourceJSON is a NATS element of GET /v1/sources.
type natsSourceJSON struct {
	natsrc.Status
	Stored      bool   `json:"stored"`                  // added with POST /v1/sources (else from a flag)
	LastEventAt string `json:"last_event_at,omitempty"` // shadows the status's, in the API's time format
}

// listedSource is a source's element of GET /v1/sources.
func listedSource(src sources.Source) any {
	if st := src.NATS; st != nil {
		return natsSourceJSON{Status: *st, Stored: src.Stored, LastEventAt: rfc3339Ptr(st.LastEventAt)}
	}
	st := *src.ZMQ
	j := sourceJSON{Kind: "zmq", Status: st, Stored: src.Stored, LastEventAt: rfc3339Ptr(st.LastEventAt)}
	if st.LastBatchTS > 0 {
		j.LastBatchAt = rfc3339(time.Unix(0, int64(st.LastBatchTS*1e9)))
	}
	return j
}

func (s *Server) listSources(w http.ResponseWriter, r *http.Request) {
	list, err := s.src.List()
	if err != nil {
		s.submitError(w, err)
		return
	}
	out := make([]any, len(list))
	for i, src := range list {
		out[i] = listedSource(src)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) postSource(w http.ResponseWriter, r *http.Request) {
	body, _, ok := s.readBody(w, r, bodyJSON)
	if !ok {
		return
	}
	var (
		src   sources.Source
		found bool
		err   error
		kind  struct{ Kind string }
	)
	if json.Unmarshal(body, &kind) == nil && (kind.Kind == natsrc.KindCore || kind.Kind == natsrc.KindJetStream) {
		var cfg natsrc.Config
		if err := decodeStrict(body, &cfg); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		src, found, err = s.src.AddNATS(r.Context(), cfg)
	} else {
		var req struct {
			Kind           *string `json:"kind"`
			ID             string  `json:"id"`
			Endpoint       *string `json:"endpoint"`
			ReplayEndpoint string  `json:"replay_endpoint"`
			WorkerID       *uint64 `json:"worker_id"`
			ModelName      string  `json:"model_name"`
			RoutingGroup   string  `json:"routing_group"`
			TenantID       string  `json:"tenant_id"` // accepted, ignored (docs/CONTRACT.md §9)
			// IndexedGroupKinds: the KV-cache group kinds of this source's ranks that are indexed
			// (docs/API.md "KV-cache groups"); absent: the partition's or the server's.
			IndexedGroupKinds []string `json:"indexed_group_kinds"`
		}
		if err := decodeStrict(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if req.Kind != nil && *req.Kind != "zmq" {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown source kind %q (want zmq, nats or jetstream)", *req.Kind))
			return
		}
		if req.Endpoint == nil {
			writeError(w, http.StatusBadRequest, "missing field endpoint")
			return
		}
		src, found, err = s.src.AddZMQ(r.Context(), vllm.Config{ID: req.ID, Endpoint: *req.Endpoint, ReplayEndpoint: req.ReplayEndpoint,
			WorkerID: req.WorkerID, ModelName: req.ModelName, RoutingGroup: req.RoutingGroup, IndexedGroupKinds: req.IndexedGroupKinds})
	}
	switch {
	case errors.Is(err, sources.ErrBadConfig):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, sources.ErrExists):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, sources.ErrNotStarted):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case err != nil:
		s.submitError(w, err)
	case found:
		writeJSON(w, http.StatusOK, listedSource(src))
	default:
		writeJSON(w, http.StatusOK, map[string]string{"id": src.ID})
	}
}

func (s *Server) removeEventSource(w http.ResponseWriter, r *http.Request) {
	switch err := s.src.Remove(r.Context(), r.PathValue("id")); {
	case errors.Is(err, sources.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, sources.ErrRegistered):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		s.submitError(w, err)
	default:
		writeJSON(w, http.StatusOK, struct{}{})
	}
}

// streamDump serves GET /v1/dump?stream=NAME: the partition's dump taken while the JetStream
// source consuming NAME into it is between two bursts, with the stream sequence it reflects
// (natsrc.HeaderStreamSeq) and each rank's last event id (natsrc.HeaderRankCursors): what a
// replica bootstraps from. The body is the ordinary dump; p is nil when the partition does not
// exist yet (an empty dump, at the source's position).
func (s *Server) streamDump(w http.ResponseWriter, key partition.Key, p *partition.Partition, stream string, dumpBody func() ([]byte, error)) {
	var buf []byte
	seq, cursors, err := s.src.StreamDump(stream, key, p, func() (err error) {
		buf, err = dumpBody()
		return err
	})
	if errors.Is(err, natsrc.ErrNotFound) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	if err != nil {
		s.submitError(w, err)
		return
	}
	w.Header().Set(natsrc.HeaderStreamSeq, fmt.Sprint(seq))
	w.Header().Set(natsrc.HeaderRankCursors, cursors)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
}
