package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/internal/jsondec"
	"github.com/kvindex/kvindex/partition"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// route is one entry of the API's route table. mutating routes change the index, the log or the
// configuration: with an auth token configured they require `Authorization: Bearer <token>`
// (auth.go). A new route states it here, so a mutating one cannot be added unprotected by
// forgetting a check in its handler.
type route struct {
	pattern   string
	needReady bool // answer 503 until the restart replay is done
	mutating  bool // requires the auth token when one is configured
	h         func(w http.ResponseWriter, r *http.Request)
}

// routes is the route table of Handler.
func (s *Server) routes() []route {
	rts := []route{
		{"POST /v1/events", true, true, s.postEvents},
		{"POST /v1/find_matches", true, false, s.findMatches},
		{"POST /v1/find_matches_for_request", true, false, s.findMatchesForRequest},
		{"GET /v1/ranks", true, false, s.listRanks},
		{"GET /v1/ranks/{worker_id}/{dp_rank}/events", true, false, s.rankEvents},
		{"DELETE /v1/workers/{worker_id}", true, true, s.removeWorker},
		{"DELETE /v1/workers/{worker_id}/ranks/{dp_rank}", true, true, s.removeRank},
		{"PUT /v1/workers/{worker_id}/source", true, true, s.putSource},
		{"DELETE /v1/workers/{worker_id}/source", true, true, s.deleteSource},
		{"GET /v1/sources", true, false, s.listSources},
		{"POST /v1/sources", true, true, s.postSource},
		{"DELETE /v1/sources/{id}", true, true, s.removeEventSource},
		{"GET /v1/dump", true, false, s.dump},
		{"POST /v1/flush", true, true, s.flush},
		{"POST /v1/routing_decisions", true, true, s.postRoutingDecision},
		{"PUT /v1/workers/{worker_id}/lease", true, true, s.putLease}, // leases.go
		{"DELETE /v1/workers/{worker_id}/lease", true, true, s.deleteLease},
		{"GET /v1/leases", true, false, s.listLeases},
		{"POST /v1/outcomes", true, true, s.postOutcomes}, // accuracy.go
		{"GET /v1/accuracy", true, false, s.getAccuracy},
		{"GET /healthz", false, false, s.healthz},
		{"GET /readyz", false, false, s.readyz},
		// Dynamo's standalone-indexer API (dynamo.go).
		{"POST /register", true, true, s.postRegister},
		{"POST /unregister", true, true, s.postUnregister},
		{"GET /workers", true, false, s.getWorkers},
		{"POST /query", true, false, s.postQuery},
		{"POST /query_by_hash", true, false, s.postQueryByHash},
		{"GET /dump", true, false, s.getDump},
		{"POST /register_peer", true, true, s.postRegisterPeer},
		{"POST /deregister_peer", true, true, s.postDeregisterPeer},
		{"GET /peers", true, false, s.getPeers},
		{"GET /health", false, false, s.health},               // 503 until ready (accesslog.go)
		{"POST /reopen_logs", false, false, s.postReopenLogs}, // logrotate's hook (accesslog.go)
		{"GET /metrics", false, false, promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}).ServeHTTP},
		{"GET /{$}", false, false, s.statusPage},
		{"GET /openapi.json", false, false, s.openAPI}, // openapi.go
	}
	if s.cfg.Pprof {
		// Profiles show the process's internals and cost CPU: behind the token like the writes,
		// but served on a failed store too (that is when one wants them).
		for _, p := range []struct {
			pattern string
			h       http.HandlerFunc
		}{{"GET /debug/pprof/", pprof.Index}, {"GET /debug/pprof/cmdline", pprof.Cmdline},
			{"GET /debug/pprof/profile", pprof.Profile}, {"GET /debug/pprof/symbol", pprof.Symbol},
			{"GET /debug/pprof/trace", pprof.Trace}} {
			rts = append(rts, route{p.pattern, false, false, func(w http.ResponseWriter, r *http.Request) {
				if s.authorized(w, r) {
					p.h(w, r)
				}
			}})
		}
	}
	return rts
}

// Handler returns the HTTP API of docs/API.md.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routes() {
		mux.Handle(rt.pattern, s.wrap(rt))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			start := time.Now()
			sw := &statusWriter{ResponseWriter: w}
			s.noRoute(mux, sw, r)
			s.m.observeHTTP(routeUnmatched, sw.code, start)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// noRoute answers 405 with an Allow header when the path exists under other methods, else 404,
// as JSON errors.
func (s *Server) noRoute(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, p := mux.Handler(r2); p != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (sw *statusWriter) WriteHeader(code int) {
	if sw.code == 0 {
		sw.code = code
	}
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *statusWriter) Write(b []byte) (int, error) {
	if sw.code == 0 {
		sw.code = http.StatusOK
	}
	return sw.ResponseWriter.Write(b)
}

// wrap adds the auth check of mutating routes, the failed-store gate of mutating routes
// (failure.go), the readiness gate, panic recovery and request metrics.
func (s *Server) wrap(rt route) http.Handler {
	pattern, needReady, h := rt.pattern, rt.needReady, rt.h
	obs := s.m.forRoute(pattern)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		var model *string // the access log's (a Dynamo body's model_name), only when one is written
		if s.alog != nil {
			model = new(string)
			r = r.WithContext(context.WithValue(r.Context(), accessModelKey{}, model))
		}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.m.panics.Inc()
				s.lg.Error("panic in request handler", "route", pattern, "panic", fmt.Sprint(p))
				if sw.code == 0 {
					writeError(sw, http.StatusInternalServerError, "internal error")
				}
			}
			obs.observe(sw.code, start)
			if s.alog != nil {
				s.alog.write(r, *model, sw.code, start)
			}
		}()
		if rt.mutating && !s.authorized(sw, r) {
			return
		}
		if rt.mutating {
			if err := s.storeFailure(); err != nil {
				writeError(sw, http.StatusServiceUnavailable, err.Error())
				return
			}
		}
		if needReady && !s.ready.Load() {
			writeError(sw, http.StatusServiceUnavailable, s.status.Load().(string))
			return
		}
		h(sw, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // an API, not HTML: "Bearer <token>", not "Bearer \u003ctoken\u003e"
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func (s *Server) postEvents(w http.ResponseWriter, r *http.Request) {
	body, kind, ok := s.readPooledBody(w, r, bodyJSON, bodyNDJSON, bodyMsgpack)
	if !ok {
		return
	}
	defer releaseBody(body) // the decoded events copy what they keep of it
	// An NDJSON body may carry partition lines (partition.Split: a whole-index dump or an
	// export); every segment is decoded before anything is written.
	segs := []partition.Segment{{Body: body}}
	if kind == bodyNDJSON {
		var err error
		if segs, err = partition.Split(body); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	reqKey := partitionKey(r, partitionNames{})
	batches := make([][]event.RouterEvent, len(segs))
	offset := 0
	for i, sg := range segs {
		evs, err := s.decodeEvents(sg.Body, kind)
		if err != nil {
			var de *event.DecodeError
			if errors.As(err, &de) && de.Index >= 0 {
				writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error(), "index": offset + de.Index})
				return
			}
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		batches[i] = evs
		offset += len(evs)
	}
	in := make([]engine.Batch, len(segs))
	for i, sg := range segs {
		in[i] = engine.Batch{Key: reqKey, BlockSize: sg.BlockSize, Events: batches[i], Source: engine.SourceHTTP}
		if sg.Named {
			in[i].Key = sg.Key
		}
	}
	// The engine's ingest bound, for the decoded events (admission.go): a write beyond it waits
	// at most --ingest-wait, then is answered 429 and nothing of it is written; one the engine
	// would refuse (400, 409) is answered so before it waits (engine.AdmitChecked).
	actx, release, ok := s.admitIngest(w, r, offset, func() error { return s.e.CheckBatches(in) })
	if !ok {
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(actx, s.cfg.SubmitTimeout)
	defer cancel()
	total, err := s.e.IngestBatches(ctx, in)
	if err != nil {
		s.ingestError(w, err)
		return
	}
	// {"accepted":n,"ignored":m} as writeJSON writes the map (keys in order, a newline), without
	// the map, the encoder and the reflection of a call per batch.
	var buf [64]byte
	out := append(buf[:0], `{"accepted":`...)
	out = strconv.AppendInt(out, int64(total.Accepted), 10)
	out = append(out, `,"ignored":`...)
	out = strconv.AppendInt(out, int64(total.Ignored), 10)
	writeAnswer(w, "application/json", append(out, "}\n"...))
}

func (s *Server) submitError(w http.ResponseWriter, err error) {
	if ferr := s.e.StoreFailure(); ferr != nil {
		// The failure is logged once (storeFailure), not once per refused request.
		writeError(w, http.StatusServiceUnavailable, ferr.Error())
		return
	}
	switch {
	case errors.Is(err, engine.ErrBusy):
		writeError(w, http.StatusServiceUnavailable, "busy: "+err.Error())
	case errors.Is(err, engine.ErrClosed), errors.Is(err, engine.ErrDumpCacheClosed):
		writeError(w, http.StatusServiceUnavailable, "shutting down")
	default:
		s.lg.Error("request failed", "err", err)
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// appendScores appends `"scores":[...]` (docs/API.md shape) without reflection: the answer of a
// find_matches carries up to one score per rank, so this is the hot part of the response. A score
// that lower tiers extend carries `"tiers"` (appendTiers).
func appendScores(dst []byte, a *engine.Answer) []byte {
	dst = append(dst, `"scores":[`...)
	for i := range a.Scores {
		x := &a.Scores[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"worker_id":`...)
		dst = strconv.AppendUint(dst, x.WorkerID, 10)
		dst = append(dst, `,"dp_rank":`...)
		dst = strconv.AppendUint(dst, uint64(x.DPRank), 10)
		dst = append(dst, `,"score":`...)
		dst = strconv.AppendUint(dst, uint64(x.Score), 10)
		dst = append(dst, `,"tree_size":`...)
		dst = strconv.AppendUint(dst, x.TreeSize, 10)
		if ext := a.ExtOf(i); ext != (engine.Ext{}) {
			dst = appendTiers(append(dst, `,"tiers":`...), &ext)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

func appendHashes(dst []byte, hs []uint64) []byte {
	dst = append(dst, '[')
	for i, h := range hs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, h, 10)
	}
	return append(dst, ']')
}

var scoreBufs = sync.Pool{New: func() any { return &scoreBuf{} }}

type scoreBuf struct {
	answer engine.Answer
	out    []byte
}

// writeScores answers a find_matches: {"scores":[...]} — the event-fed tree's scores raised to
// the side index's (docs/CONTRACT.md §8), extended by the lower tiers unless deviceOnly (docs/CONTRACT.md §7), trimmed to
// the request's shape — plus, when withHashes, "block_hashes"; in msgpack when the request's
// Accept asks for it. p nil (an unknown partition) answers no scores.
func (s *Server) writeScores(w http.ResponseWriter, r *http.Request, p *partition.Partition, hashes []uint64, earlyExit, deviceOnly bool, shape answerShape, withHashes bool) {
	buf := scoreBufs.Get().(*scoreBuf)
	defer scoreBufs.Put(buf)
	start := time.Now()
	s.e.FindInto(&buf.answer, p, engine.Query{Hashes: hashes, EarlyExit: earlyExit, DeviceOnly: deviceOnly,
		MinScore: shape.MinScore, TopK: shape.TopK})
	scores := &buf.answer
	s.m.findSec.Observe(time.Since(start).Seconds())
	if wantsMsgpack(r) {
		buf.out = appendAnswerMsgpack(buf.out[:0], scores, hashes, withHashes)
		writeAnswer(w, msgpackType, buf.out)
		return
	}
	out := append(buf.out[:0], '{')
	out = appendScores(out, scores)
	if withHashes {
		out = append(out, `,"block_hashes":`...)
		out = appendHashes(out, hashes)
	}
	out = append(out, "}\n"...)
	buf.out = out
	writeAnswer(w, "application/json", out)
}

// writeAnswer writes a 200 answer whose body is whole in hand. Its Content-Length spares the
// chunked framing a body over net/http's 2 KiB buffer gets otherwise: the last chunk is a write
// of its own after the handler returns, which the client has to wait for before it has the end
// of the body (a whole find_matches answer is ~18 KB at --scale 8).
func writeAnswer(w http.ResponseWriter, ctype string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// decodeStrict decodes a JSON object body into v (jsondec.Object): errors name the JSON field
// as the client wrote it and what was expected, never a Go type.
func decodeStrict(body []byte, v any) error { return jsondec.Object(body, v) }

func (s *Server) findMatches(w http.ResponseWriter, r *http.Request) {
	body, _, ok := s.readPooledBody(w, r, bodyJSON)
	if !ok {
		return
	}
	defer releaseBody(body) // the request's fields are copies
	var req findRequest
	if err := decodeFindRequest(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.BlockHashes == nil {
		writeError(w, http.StatusBadRequest, "missing field block_hashes")
		return
	}
	p, _ := s.parts.Lookup(partitionKey(r, req.partitionNames))
	s.writeScores(w, r, p, *req.BlockHashes, req.EarlyExit, req.DeviceOnly, req.answerShape, false)
}

func (s *Server) findMatchesForRequest(w http.ResponseWriter, r *http.Request) {
	body, _, ok := s.readBody(w, r, bodyJSON)
	if !ok {
		return
	}
	var req struct {
		Tokens         *[]uint32 `json:"tokens"`
		LoraName       string    `json:"lora_name"`
		CacheNamespace string    `json:"cache_namespace"`
		EarlyExit      bool      `json:"early_exit"`
		DeviceOnly     bool      `json:"device_only"`
		partitionNames
		answerShape
	}
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Tokens == nil {
		writeError(w, http.StatusBadRequest, "missing field tokens")
		return
	}
	// The partition's block size; an unknown partition hashes with --block-size and scores nothing.
	key := partitionKey(r, req.partitionNames)
	p, _ := s.parts.Lookup(key)
	hashes := s.e.HashTokens(key, *req.Tokens, req.LoraName, req.CacheNamespace)
	s.writeScores(w, r, p, hashes, req.EarlyExit, req.DeviceOnly, req.answerShape, true)
}

type gapsJSON struct {
	Recovered uint64 `json:"recovered"`
	Lost      uint64 `json:"lost"`
}

type rankJSON struct {
	WorkerID     uint64 `json:"worker_id"`
	DPRank       uint32 `json:"dp_rank"`
	ModelName    string `json:"model_name"`
	RoutingGroup string `json:"routing_group"`
	Mode         string `json:"mode"` // events, approximate or mixed
	Blocks       uint64 `json:"blocks"`
	ApproxBlocks int    `json:"approx_blocks"`
	// EvictedBlocks: device blocks evicted under --max-index-bytes since the process started.
	EvictedBlocks uint64    `json:"evicted_blocks"`
	Tiers         tiersJSON `json:"tiers"` // lower-tier blocks (docs/CONTRACT.md §7)
	Lane          int       `json:"lane"`
	FirstEventID  uint64    `json:"first_event_id"`
	LastEventID   uint64    `json:"last_event_id"`
	State         string    `json:"state"`
	Gaps          gapsJSON  `json:"gaps"`
	// Groups: the rank's KV-cache groups (hybrid models); absent for streams without them.
	Groups []engine.GroupStatus `json:"groups,omitempty"`
	// The worker's lease (leases.go): stale while it is expired (left out of answers).
	Stale          bool   `json:"stale"`
	LeaseExpiresAt string `json:"lease_expires_at,omitempty"`
}

func (s *Server) listRanks(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r.URL.Query(), partitionParams...); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	only := uint32(0)
	filter := namesPartition(r)
	if filter {
		p, ok := s.parts.Lookup(partitionKey(r, partitionNames{}))
		if !ok {
			writeJSON(w, http.StatusOK, []rankJSON{})
			return
		}
		only = p.ID
	}
	out := []rankJSON{}
	for _, v := range s.e.Ranks(only, !filter) {
		first := uint64(0)
		if v.Mode != engine.ModeApproximate {
			var err error
			if first, err = s.e.FirstEventID(v.Rank); err != nil {
				s.submitError(w, err)
				return
			}
		}
		out = append(out, rankJSON{Mode: v.Mode, ApproxBlocks: v.SideBlocks, ModelName: v.Key.ModelName, RoutingGroup: v.Key.RoutingGroup,
			WorkerID: v.Rank.WorkerID, DPRank: v.Rank.DPRank, Blocks: v.Blocks[event.TierDevice], Lane: v.Lane, FirstEventID: first,
			LastEventID: v.Last, State: v.State.String(), Gaps: gapsJSON{Recovered: v.Recovered, Lost: v.Lost}, Tiers: tiersOf(v.Blocks),
			Groups: v.Groups, EvictedBlocks: v.Evicted})
	}
	for i := range out {
		s.setLeaseFields(&out[i])
	}
	writeJSON(w, http.StatusOK, out)
}

func pathU64(r *http.Request, name string, bits int) (uint64, error) {
	v, err := strconv.ParseUint(r.PathValue(name), 10, bits)
	if err != nil {
		return 0, fmt.Errorf("path parameter %s=%q is not an unsigned %d-bit integer", name, r.PathValue(name), bits)
	}
	return v, nil
}

// pathWorker reads {worker_id} from the path; it answers 400 itself and returns false.
func pathWorker(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	wid, err := pathU64(r, "worker_id", 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return 0, false
	}
	return wid, true
}

func (s *Server) removeWorker(w http.ResponseWriter, r *http.Request) {
	wid, ok := pathWorker(w, r)
	if !ok {
		return
	}
	if err := checkQuery(r.URL.Query(), partitionParams...); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	// A partition that is given and is not the worker's answers as for an unknown worker. The
	// engine's Remove ends the worker's lease and drops the partition it left when nothing else
	// is in it (docs/CONTRACT.md §9; a registered worker keeps its registrations and partition).
	gone, err := s.e.Remove(r.Context(), wid, namedKey(r))
	if err != nil {
		s.submitError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"removed_ranks": gone.Ranks})
}

// pathRank reads {worker_id} and {dp_rank} from the path.
func pathRank(r *http.Request) (event.Rank, error) {
	wid, err := pathU64(r, "worker_id", 64)
	if err != nil {
		return event.Rank{}, err
	}
	dp, err := pathU64(r, "dp_rank", 32)
	if err != nil {
		return event.Rank{}, err
	}
	return event.Rank{WorkerID: wid, DPRank: uint32(dp)}, nil
}

func (s *Server) removeRank(w http.ResponseWriter, r *http.Request) {
	rk, err := pathRank(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ok, err := s.e.RemoveRankIn(r.Context(), rk, namedKey(r))
	if err != nil {
		s.submitError(w, err)
		return
	}
	n := 0
	if ok {
		n = 1
	}
	writeJSON(w, http.StatusOK, map[string]int{"removed_ranks": n})
}

func (s *Server) flush(w http.ResponseWriter, r *http.Request) {
	if err := s.e.Flush(r.Context()); err != nil { // events accepted before, and side blocks due now
		s.submitError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.e.StoreFailure(); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if !s.ready.Load() {
		writeError(w, http.StatusServiceUnavailable, s.status.Load().(string))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// checkQuery refuses query parameters other than allowed (a typo such as ?worker=7 would
// otherwise be ignored silently and answer for every worker) and repeated ones.
func checkQuery(q url.Values, allowed ...string) error {
	for name, vs := range q {
		if len(allowed) == 0 {
			return fmt.Errorf("unknown query parameter %q (this route takes none)", name)
		}
		if !slices.Contains(allowed, name) {
			return fmt.Errorf("unknown query parameter %q (this route takes %s)", name, strings.Join(allowed, ", "))
		}
		if len(vs) > 1 {
			return fmt.Errorf("query parameter %s given %d times", name, len(vs))
		}
	}
	return nil
}

func (s *Server) dump(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := checkQuery(q, append([]string{"worker_id", "dp_rank", "stream"}, partitionParams...)...); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var wantW *uint64
	var wantR *uint32
	if v := q.Get("worker_id"); v != "" {
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("query parameter worker_id=%q is not an unsigned 64-bit integer", v))
			return
		}
		wantW = &x
	}
	if v := q.Get("dp_rank"); v != "" {
		x, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("query parameter dp_rank=%q is not an unsigned 32-bit integer", v))
			return
		}
		y := uint32(x)
		wantR = &y
	}
	keep := func(rk event.Rank) bool {
		return (wantW == nil || rk.WorkerID == *wantW) && (wantR == nil || rk.DPRank == *wantR)
	}
	// Without a partition or worker: the whole index, each partition after its partition line,
	// replayable as it is (POST /v1/events as NDJSON). With a partition: that partition's lines
	// only; with a worker and no partition: the worker's own partition, as the range route finds
	// it.
	whole := !namesPartition(r) && !q.Has("stream") && wantW == nil
	p, ok := s.parts.Lookup(partitionKey(r, partitionNames{}))
	if wantW != nil && !namesPartition(r) {
		if id, known := s.workerPartition(*wantW); known {
			p, ok = s.parts.Get(id), true
		}
	}
	if !ok && !q.Has("stream") && !whole {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		return
	}
	body := func() ([]byte, error) {
		if whole {
			return s.e.AppendWholeDump(r.Context(), nil, keep)
		}
		if p == nil {
			return nil, nil
		}
		return s.e.AppendDumpNDJSON(r.Context(), nil, p, keep)
	}
	if q.Has("stream") {
		if wantW != nil || wantR != nil {
			writeError(w, http.StatusBadRequest, "query parameter stream dumps a whole partition: it takes no worker_id or dp_rank")
			return
		}
		s.streamDump(w, partitionKey(r, partitionNames{}), p, q.Get("stream"), body)
		return
	}
	buf, err := body()
	if err != nil {
		s.submitError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
}
