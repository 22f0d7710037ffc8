package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/natsrc"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/vllm"
)

// zmqSourceMetaPrefix names the publishers added with POST /v1/sources in the log's global
// metadata: "zmqsource/<id>" → the source's vllm.Config as JSON. Their seq cursors live under
// vllm.CursorMeta(id). Sources from --zmq are not stored (the flag names them at every start)
// but keep their cursor the same way, keyed by the endpoint's id.
const zmqSourceMetaPrefix = "zmqsource/"

// ParseZMQFlag parses one --zmq value:
// ENDPOINT[?replay=ENDPOINT&worker_id=N&model_name=M&routing_group=G&indexed_group_kinds=K,K],
// e.g. tcp://vllm-0:5557?replay=tcp://vllm-0:5558&worker_id=7.
func ParseZMQFlag(v string) (vllm.Config, error) {
	ep, query, _ := strings.Cut(strings.TrimSpace(v), "?")
	cfg := vllm.Config{Endpoint: ep}
	q, err := url.ParseQuery(query)
	if err != nil {
		return cfg, fmt.Errorf("--zmq %q: %w", v, err)
	}
	for k, vals := range q {
		val := vals[len(vals)-1]
		switch k {
		case "replay":
			cfg.ReplayEndpoint = val
		case "worker_id":
			w, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return cfg, fmt.Errorf("--zmq %q: worker_id %q is not an unsigned 64-bit integer", v, val)
			}
			cfg.WorkerID = &w
		case "model_name":
			cfg.ModelName = val
		case "routing_group":
			cfg.RoutingGroup = val
		case "indexed_group_kinds": // kinds joined with '+' (the flag's values are comma separated), or the option repeated
			cfg.IndexedGroupKinds = vals
		default:
			return cfg, fmt.Errorf("--zmq %q: unknown option %q (want replay, worker_id, model_name, routing_group, indexed_group_kinds)", v, k)
		}
	}
	cfg, err = vllm.Normalize(cfg)
	if err != nil {
		return cfg, fmt.Errorf("--zmq %q: %w", v, err)
	}
	return cfg, nil
}

// ParsePartitionGroupKinds parses serve --partition-group-kinds values,
// MODEL[@ROUTING_GROUP]=KIND[+KIND...], e.g. gemma-3=full_attention+sliding_window: the KV-cache
// group kinds indexed in that partition (routing group default "default").
func ParsePartitionGroupKinds(vals []string) (map[partition.Key]event.GroupKinds, error) {
	out := map[partition.Key]event.GroupKinds{}
	for _, v := range vals {
		if strings.TrimSpace(v) == "" {
			continue
		}
		i := strings.LastIndex(v, "=")
		if i < 0 {
			i = len(v)
		}
		model, group, _ := strings.Cut(strings.TrimSpace(v[:i]), "@")
		if i == len(v) || model == "" {
			return nil, fmt.Errorf("--partition-group-kinds %q: want MODEL[@ROUTING_GROUP]=KIND[+KIND...]", v)
		}
		kinds, err := event.ParseGroupKinds([]string{v[i+1:]})
		if err == nil && kinds == 0 {
			err = errors.New("no kind named")
		}
		if err != nil {
			return nil, fmt.Errorf("--partition-group-kinds %q: %w", v, err)
		}
		k := partition.KeyOf(model, group, "")
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--partition-group-kinds %q: partition %s named twice", v, k)
		}
		out[k] = kinds
	}
	return out, nil
}

// Place implements vllm.Placer: a source's ranks go to the partition its configuration names
// (model_name / routing_group), else to the model of its topic kv@<pod>@<model> (routing group
// "default"), else to the default partition. The source's block size, when configured, must be
// the partition's (a new partition takes it); otherwise a new partition takes the batch's block
// size, and an existing one keeps its own. The worker is claimed for the partition (a worker with
// ranks elsewhere is refused), and takes the source's indexed group kinds (none: its partition's
// or the server's), before any event of the batch is decided.
func (s *Server) Place(ctx context.Context, cfg vllm.Config, topic string, worker uint64, batchBlockSize int) (uint32, error) {
	model := cfg.ModelName
	if model == "" {
		model, _ = vllm.ModelFromTopic(topic)
	}
	key := partition.KeyOf(model, cfg.RoutingGroup, "")
	bs := cfg.BlockSize
	if _, exists := s.parts.Lookup(key); bs == 0 && !exists {
		bs = batchBlockSize
	}
	src := engine.SourceZMQ
	if strings.HasPrefix(cfg.ID, registrySourcePrefix) {
		src = engine.SourceDynamo // the source of a /register
	}
	kinds, _ := event.ParseGroupKinds(cfg.IndexedGroupKinds) // checked when the source was added
	id, err := s.e.Place(ctx, engine.Placement{Door: src, Key: key, BlockSize: bs, Worker: worker, EventSource: true, Kinds: kinds})
	if err != nil {
		return 0, fmt.Errorf("source %s: %w", cfg.ID, err)
	}
	return id, nil
}

// zmqConfigs parses Config.ZMQ (Open refuses a bad one).
func zmqConfigs(flags []string) ([]vllm.Config, error) {
	var out []vllm.Config
	for _, f := range flags {
		if strings.TrimSpace(f) == "" {
			continue
		}
		cfg, err := ParseZMQFlag(f)
		if err != nil {
			return nil, err
		}
		out = append(out, cfg)
	}
	return out, nil
}

// startZMQ starts the --zmq sources and the stored ones, once the lanes run. A stored source
// the flag also names runs once.
func (s *Server) startZMQ() error {
	flagCfgs, err := zmqConfigs(s.cfg.ZMQ)
	if err != nil {
		return err
	}
	stored, err := loadStored[vllm.Config](s, zmqSourceMetaPrefix)
	if err != nil {
		return err
	}
	cfgs := append(flagCfgs, stored...)
	for _, cfg := range cfgs {
		if _, err := s.zmq.Add(cfg); err != nil {
			if errors.Is(err, vllm.ErrDuplicate) {
				continue
			}
			s.lg.Error("not starting zmq source", "endpoint", cfg.Endpoint, "err", err)
			continue
		}
		s.lg.Info("zmq source started", "source", cfg.ID, "endpoint", cfg.Endpoint, "replay_endpoint", cfg.ReplayEndpoint)
	}
	return nil
}

// loadStored decodes the source configs stored as JSON under prefix, in key order; an
// unreadable one is logged and skipped.
func loadStored[T any](s *Server, prefix string) ([]T, error) {
	stored, err := s.e.Metas(prefix)
	if err != nil {
		return nil, fmt.Errorf("loading the stored sources %s*: %w", prefix, err)
	}
	names := make([]string, 0, len(stored))
	for k := range stored {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []T
	for _, k := range names {
		var cfg T
		if err := json.Unmarshal(stored[k], &cfg); err != nil {
			s.lg.Error("skipping an unreadable stored source", "key", k, "err", err)
			continue
		}
		out = append(out, cfg)
	}
	return out, nil
}

// sourceJSON is one element of GET /v1/sources.
type sourceJSON struct {
	Kind string `json:"kind"`
	vllm.Status
	Stored bool `json:"stored"` // added with POST /v1/sources (else from --zmq)
	// LastEventAt shadows the status's (RFC 3339 with nanoseconds) in the API's time format;
	// LastBatchAt is the deprecated numeric last_batch_ts in it.
	LastEventAt string `json:"last_event_at,omitempty"`
	LastBatchAt string `json:"last_batch_at,omitempty"`
}

func zmqSourceJSON(st vllm.Status, stored bool) sourceJSON {
	j := sourceJSON{Kind: "zmq", Status: st, Stored: stored, LastEventAt: rfc3339Ptr(st.LastEventAt)}
	if st.LastBatchTS > 0 {
		j.LastBatchAt = rfc3339(time.Unix(0, int64(st.LastBatchTS*1e9)))
	}
	return j
}

func (s *Server) sourceJSON(st vllm.Status) (sourceJSON, error) {
	_, ok, err := s.e.Meta(zmqSourceMetaPrefix + st.ID)
	return zmqSourceJSON(st, ok), err
}

func (s *Server) listSources(w http.ResponseWriter, r *http.Request) {
	out := []any{}
	for _, st := range s.zmq.Status() {
		j, err := s.sourceJSON(st)
		if err != nil {
			s.submitError(w, err)
			return
		}
		out = append(out, j)
	}
	ns, err := s.natsSources()
	if err != nil {
		s.submitError(w, err)
		return
	}
	for _, j := range ns {
		out = append(out, j)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) postSource(w http.ResponseWriter, r *http.Request) {
	body, _, ok := s.readBody(w, r, bodyJSON)
	if !ok {
		return
	}
	var kind struct{ Kind string }
	if json.Unmarshal(body, &kind) == nil && (kind.Kind == natsrc.KindCore || kind.Kind == natsrc.KindJetStream) {
		s.postNATSSource(w, r, body)
		return
	}
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
	cfg, err := vllm.Normalize(vllm.Config{ID: req.ID, Endpoint: *req.Endpoint, ReplayEndpoint: req.ReplayEndpoint, WorkerID: req.WorkerID,
		ModelName: req.ModelName, RoutingGroup: req.RoutingGroup, IndexedGroupKinds: req.IndexedGroupKinds})
	if err == nil && strings.ContainsAny(cfg.ID, "/ ") {
		err = fmt.Errorf("source id %q must not contain '/' or spaces", cfg.ID)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.zmq.Has(cfg.ID) {
		writeError(w, http.StatusConflict, fmt.Sprintf("source %s already exists", cfg.ID))
		return
	}
	val, err := json.Marshal(cfg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if err := s.e.CommitMeta(r.Context(), func(b engine.MetaBatch) {
		b.SetMeta(zmqSourceMetaPrefix+cfg.ID, val)
	}); err != nil {
		s.submitError(w, err)
		return
	}
	if _, err := s.zmq.Add(cfg); err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, vllm.ErrDuplicate) {
			code = http.StatusConflict
		}
		writeError(w, code, err.Error())
		return
	}
	s.lg.Info("zmq source added", "source", cfg.ID, "endpoint", cfg.Endpoint, "replay_endpoint", cfg.ReplayEndpoint)
	for _, st := range s.zmq.Status() {
		if st.ID == cfg.ID {
			writeJSON(w, http.StatusOK, zmqSourceJSON(st, true))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": cfg.ID})
}

func (s *Server) deleteZMQSource(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if s.nats.Has(id) {
		s.deleteNATSSource(w, r, id)
		return
	}
	if err := s.zmq.Remove(id); err != nil {
		if errors.Is(err, vllm.ErrNotFound) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no source %q", id))
			return
		}
		s.submitError(w, err)
		return
	}
	// The source is stopped: forget it and its cursor (added again later, it starts afresh).
	if err := s.e.CommitMeta(r.Context(), func(b engine.MetaBatch) {
		b.DeleteMeta(zmqSourceMetaPrefix + id)
		b.DeleteMeta(vllm.CursorMeta(id))
	}); err != nil {
		s.submitError(w, err)
		return
	}
	s.lg.Info("zmq source removed", "source", id)
	writeJSON(w, http.StatusOK, struct{}{})
}
