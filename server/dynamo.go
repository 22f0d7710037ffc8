package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/peers"
	"github.com/kvindex/kvindex/sources"
	"github.com/kvindex/kvindex/vllm"
)

// Dynamo's standalone-indexer API (docs/CONTRACT.md §9, docs/API.md "Dynamo's standalone-indexer routes"):
// the root routes /register, /unregister, /workers, /query, /query_by_hash, /dump,
// /register_peer, /deregister_peer, /peers and /health answer with the JSON shapes of
// `python -m dynamo.indexer`, so its clients can point at kvindex unchanged.
//
// Decisions (where Dynamo's behaviour and kvindex's differ or Dynamo is silent):
//   - A registration (instance_id, dp_rank) is a vLLM ZMQ source (package vllm) with the
//     instance as its worker id, the registration's dp_rank for batches that carry none, and the
//     partition and block size of the registration. It is a field of the instance's worker
//     record in the engine (Engine.Register, Unregister), and only there: the source's config
//     is built from the record (sources.RegistrationConfig), so a restarted kvindex resumes every
//     registered listener from its seq cursor. Persistence does not change what a Dynamo client sees: the identical
//     /register of a registered rank (a client re-registering after a restart) is 201; a
//     conflicting one stays 409.
//   - An instance belongs to one partition: /register refuses it (409) when it is registered, or
//     has ranks from any source, in another partition. tenant_id is accepted and ignored (docs/CONTRACT.md §9),
//     here as on every route.
//   - /unregister removes the instance's ranks (blocks and logs) like DELETE /v1/workers/{id}, or
//     one rank with dp_rank, and stops and forgets their sources. Without routing_group it
//     matches the instance in any group of model_name.
//   - /query and /query_by_hash score like find_matches: the event-fed tree and, by the max rule
//     of docs/CONTRACT.md §8, the side index of approximate mode (frequencies count those scores too).
//   - Scores are in tokens: blocks × the partition's block size. The instances summary is
//     cumulative over the storage tiers (rankMatch); the tier extensions are 0 until the storage
//     tiers land, so cpu = gpu and disk = cpu.
//   - /register may take a lease, "lease_ttl_ms" (kvindex's extension; Dynamo has none): the
//     instance's lease, taken or renewed as PUT /v1/workers/{id}/lease does, in the commit that
//     records the registration (Engine.Register): a /register that fails changed nothing. A
//     client re-registering renews it. /unregister of the
//     instance (or of its last rank) ends it (Engine.Unregister).
//   - Peers registered with /register_peer are persisted ("peer/<url>"): a restarted kvindex
//     lists them again and, with --peers, tries them after the flag's peers when a partition
//     starts empty (peers.go).

// Sentinels of the Dynamo routes.
var (
	// ErrAlreadyRegistered: /register of an (instance_id, dp_rank) that is registered.
	ErrAlreadyRegistered = engine.ErrAlreadyRegistered
	// ErrNotRegistered: /unregister of an instance (or rank) kvindex does not know there.
	ErrNotRegistered = engine.ErrNotRegistered
	// ErrNoPartition: /query or /query_by_hash of a partition that does not exist.
	ErrNoPartition = errors.New("no indexer")
	// ErrPeerNotFound: /deregister_peer of a URL that is not a peer.
	ErrPeerNotFound = peers.ErrNotFound
)

// registration is one /register as the routes see it: the instance, its partition and the
// engine's record of the dp rank.
type registration struct {
	InstanceID uint64
	Key        partition.Key
	engine.Registration
}

// reregisterConflict is the 409 of a /register of a registered (instance_id, dp_rank) with
// other settings: it names the stored registration and the way out.
func reregisterConflict(inst uint64, old engine.Registration) string {
	replay := ""
	if old.ReplayEndpoint != "" {
		replay = ", replay_endpoint " + old.ReplayEndpoint
	}
	return fmt.Sprintf("instance %d dp_rank %d %v with endpoint %s%s, block_size %d: register the same settings again, "+
		"or POST /unregister it first", inst, old.DPRank, ErrAlreadyRegistered, old.Endpoint, replay, old.BlockSize)
}

// registrySourceID is the source id of a registration (its seq cursor is kept under it).
func registrySourceID(instance uint64, dp uint32) string {
	return fmt.Sprintf("%s%d-%d", registrySourcePrefix, instance, dp)
}

// registrySourcePrefix starts the source id of every registration (its ranks' source kind is
// engine.SourceDynamo).
const registrySourcePrefix = "dynamo-"

// registrations lists every registration (the engine's worker records), by instance then dp
// rank.
func (s *Server) registrations() []registration {
	var out []registration
	for _, w := range s.e.Workers() {
		for _, r := range w.Registrations {
			out = append(out, registration{InstanceID: w.Worker, Key: w.Key, Registration: r})
		}
	}
	return out
}

// statusOK is Dynamo's success body.
var statusOK = map[string]string{"status": "ok"}

// decodeDynamo reads a JSON body into v as Dynamo's axum Json extractor does: unknown fields
// are ignored; a body that is not a JSON object is 400, a field of the wrong type 422. It
// answers itself and returns false.
func (s *Server) decodeDynamo(w http.ResponseWriter, r *http.Request, v any) bool {
	body, _, ok := s.readBody(w, r, bodyJSON)
	if !ok {
		return false
	}
	noteModel(r, body)
	if err := decodeStrict(body, v); err != nil {
		code := http.StatusBadRequest
		if json.Valid(body) && bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
			code = http.StatusUnprocessableEntity
		}
		writeError(w, code, err.Error())
		return false
	}
	return true
}

// missingField answers Dynamo's 422 for a required field the body lacks (its Json extractor's
// "missing field" rejection; kvindex answers it as {"error"} JSON).
func missingField(w http.ResponseWriter, name string) {
	writeError(w, http.StatusUnprocessableEntity, "missing field `"+name+"`")
}

func (s *Server) postRegister(w http.ResponseWriter, r *http.Request) {
	var req struct {
		InstanceID     *uint64 `json:"instance_id"`
		Endpoint       *string `json:"endpoint"`
		ReplayEndpoint string  `json:"replay_endpoint"`
		BlockSize      *uint32 `json:"block_size"`
		DPRank         uint32  `json:"dp_rank"`
		LeaseTTLMs     *uint64 `json:"lease_ttl_ms"`
		partitionNames
	}
	if !s.decodeDynamo(w, r, &req) {
		return
	}
	var lease time.Duration
	if req.LeaseTTLMs != nil {
		if lease = leaseTTL(*req.LeaseTTLMs); lease == 0 {
			writeError(w, http.StatusBadRequest, badLeaseTTL("lease_ttl_ms"))
			return
		}
	}
	switch {
	case req.InstanceID == nil:
		missingField(w, "instance_id")
		return
	case req.Endpoint == nil:
		missingField(w, "endpoint")
		return
	case req.ModelName == "":
		missingField(w, "model_name")
		return
	case req.BlockSize == nil:
		missingField(w, "block_size")
		return
	case *req.BlockSize == 0:
		writeError(w, http.StatusBadRequest, "block_size must be > 0 (tokens per block)")
		return
	}
	key := partitionKey(r, req.partitionNames)
	reg := registration{InstanceID: *req.InstanceID, Key: key, Registration: engine.Registration{DPRank: req.DPRank, Endpoint: *req.Endpoint,
		ReplayEndpoint: req.ReplayEndpoint, BlockSize: int(*req.BlockSize), SourceID: registrySourceID(*req.InstanceID, req.DPRank)}}
	cfg, err := sources.RegistrationConfig(reg.InstanceID, key, reg.Registration)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.src.CheckRegistration(reg.InstanceID, reg.DPRank, cfg.ID); err != nil {
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	// The registration's source starts once it stands (started again for the same registration
	// after an indexer restart, Dynamo's documented flow), before an /unregister can stop it.
	// The registration is durable by then: a source that does not start (the server stopping)
	// is logged and starts with the next restart; the /register is answered 201, as it stands.
	start := func(again bool) error {
		if err := s.src.StartRegistered(cfg, again); err != nil {
			s.lg.Error("registered, but its zmq source did not start: it starts with the next restart",
				"instance_id", reg.InstanceID, "dp_rank", reg.DPRank, "err", err)
		}
		return nil
	}
	again, err := s.e.Register(r.Context(), reg.InstanceID, key, reg.Registration, lease, start)
	var re *engine.RegisterError
	switch {
	case errors.As(err, &re) && errors.Is(err, partition.ErrWorkerElsewhere):
		writeError(w, http.StatusConflict, fmt.Sprintf("%v: instance %d is already registered for model_name=%s routing_group=%s "+
			"(endpoint %s); register it with that model_name and routing_group, or POST /unregister it first",
			partition.ErrWorkerElsewhere, reg.InstanceID, re.Key.ModelName, re.Key.RoutingGroup, re.Have.Endpoint))
		return
	case errors.As(err, &re):
		writeError(w, http.StatusConflict, reregisterConflict(reg.InstanceID, re.Have))
		return
	case errors.As(err, new(*partition.ElsewhereError)), errors.Is(err, partition.ErrBlockSizeMismatch), errors.Is(err, partition.ErrBadName):
		s.partitionError(w, err, -1)
		return
	case err != nil:
		s.submitError(w, err)
		return
	}
	if !again {
		s.lg.Info("instance registered", "instance_id", reg.InstanceID, "dp_rank", reg.DPRank, "model_name", key.ModelName,
			"routing_group", key.RoutingGroup, "block_size", reg.BlockSize, "endpoint", reg.Endpoint, "source", cfg.ID,
			"lease_ttl_ms", lease.Milliseconds())
	}
	writeJSON(w, http.StatusCreated, statusOK)
}

func (s *Server) postUnregister(w http.ResponseWriter, r *http.Request) {
	var req struct {
		InstanceID   *uint64 `json:"instance_id"`
		ModelName    string  `json:"model_name"`
		RoutingGroup string  `json:"routing_group"`
		DPRank       *uint32 `json:"dp_rank"`
	}
	if !s.decodeDynamo(w, r, &req) {
		return
	}
	switch {
	case req.InstanceID == nil:
		missingField(w, "instance_id")
		return
	case req.ModelName == "":
		missingField(w, "model_name")
		return
	}
	inst := *req.InstanceID
	// The engine ends the registrations after their sources stopped (their configs and cursors
	// deleted with the record), then removes the ranks; a worker left with nothing is removed as
	// DELETE removes it.
	out, err := s.e.Unregister(r.Context(), inst, req.ModelName, req.RoutingGroup, req.DPRank, s.src.StopRegistered)
	switch {
	case errors.Is(err, ErrNotRegistered):
		writeError(w, http.StatusNotFound, err.Error())
		return
	case err != nil:
		s.submitError(w, err)
		return
	}
	s.lg.Info("instance unregistered", "instance_id", inst, "model_name", out.Key.ModelName, "routing_group", out.Key.RoutingGroup,
		"removed_registrations", out.Registrations)
	writeJSON(w, http.StatusOK, statusOK)
}

// Listener states of /workers (Dynamo's ListenerStatus). In Dynamo a listener is pending until
// its SUB socket is set up and active after (libzmq's connect succeeds with no publisher up);
// failed is terminal. kvindex's source retries a publisher that is not up (yet) for ever, so it
// reads pending while it dials or backs off, and never failed (its last error is in
// GET /v1/sources).
const (
	listenerPending = "pending" // dialing, or backing off before the next dial
	listenerActive  = "active"  // connected (or replaying a gap)
	listenerPaused  = "paused"  // its source is not running
	listenerFailed  = "failed"  // stopped for good (kvindex's sources never are)
)

// listenerJSON is one listener of /workers (Dynamo's last_error goes with failed only, which
// kvindex's sources never are).
type listenerJSON struct {
	Endpoint string `json:"endpoint"`
	Status   string `json:"status"`
}

type workerJSON struct {
	InstanceID   uint64                  `json:"instance_id"`
	Source       string                  `json:"source"`
	Status       string                  `json:"status"`
	ModelName    string                  `json:"model_name"`
	RoutingGroup string                  `json:"routing_group"`
	BlockSize    int                     `json:"block_size"`
	Endpoints    map[string]string       `json:"endpoints"`
	Listeners    map[string]listenerJSON `json:"listeners"`
}

// listenerOf maps a source's state to Dynamo's listener status.
func listenerOf(st vllm.Status, running bool) string {
	switch {
	case !running:
		return listenerPaused
	case st.State == vllm.StateConnected || st.State == vllm.StateReplaying:
		return listenerActive
	case st.State == vllm.StateStopped:
		return listenerPaused
	}
	return listenerPending
}

// aggregateStatus is an instance's status from its listeners': failed wins, then pending, then
// active, else paused.
func aggregateStatus(ls map[string]listenerJSON) string {
	seen := map[string]bool{}
	for _, l := range ls {
		seen[l.Status] = true
	}
	for _, st := range []string{listenerFailed, listenerPending, listenerActive} {
		if seen[st] {
			return st
		}
	}
	return listenerPaused
}

func (s *Server) getWorkers(w http.ResponseWriter, r *http.Request) {
	// Unknown parameters (tenant_id among them) are ignored, as Dynamo ignores them.
	q := r.URL.Query()
	model, group := q.Get("model_name"), q.Get("routing_group")
	states := map[string]vllm.Status{}
	for _, st := range s.zmq.Status() {
		states[st.ID] = st
	}
	out := []workerJSON{}
	for _, x := range s.registrations() {
		if (model != "" && x.Key.ModelName != model) || (group != "" && x.Key.RoutingGroup != group) {
			continue
		}
		if n := len(out); n == 0 || out[n-1].InstanceID != x.InstanceID {
			out = append(out, workerJSON{InstanceID: x.InstanceID, Source: "zmq", ModelName: x.Key.ModelName, RoutingGroup: x.Key.RoutingGroup,
				BlockSize: x.BlockSize, Endpoints: map[string]string{}, Listeners: map[string]listenerJSON{}})
		}
		wj := &out[len(out)-1]
		st, running := states[x.SourceID]
		status := listenerOf(st, running)
		dp := strconv.FormatUint(uint64(x.DPRank), 10)
		wj.Endpoints[dp] = x.Endpoint
		wj.Listeners[dp] = listenerJSON{Endpoint: x.Endpoint, Status: status}
	}
	for i := range out {
		out[i].Status = aggregateStatus(out[i].Listeners)
	}
	writeJSON(w, http.StatusOK, out)
}

// rankMatch is one rank's answer to a query, in blocks: Device is its device-tree score, the
// others the storage tiers' extensions beyond the previous tier (docs/CONTRACT.md §7). The tier extensions
// are 0 until the storage tiers land; the answer (appendQueryAnswer) already folds them in.
type rankMatch struct {
	WorkerID                     uint64
	DPRank                       uint32
	Device, Host, Disk, External uint64
}

// answerQuery scores hashes in partition p as find_matches does (the event-fed tree, and the
// side index of approximate mode by the max rule) and writes the answer.
func (s *Server) answerQuery(w http.ResponseWriter, p *partition.Partition, hashes []uint64) {
	buf := scoreBufs.Get().(*scoreBuf)
	defer scoreBufs.Put(buf)
	a := &buf.answer
	s.e.FindInto(a, p, engine.Query{Hashes: hashes})
	ms := make([]rankMatch, len(a.Scores))
	for i, sc := range a.Scores {
		ext := a.ExtOf(i)
		ms[i] = rankMatch{WorkerID: sc.WorkerID, DPRank: sc.DPRank, Device: uint64(sc.Score),
			Host: uint64(ext[0]), Disk: uint64(ext[1]), External: uint64(ext[2])}
	}
	buf.out = appendQueryAnswer(buf.out[:0], ms, uint64(p.BlockSize)) // the answer, appended
	writeAnswer(w, "application/json", buf.out)
}

// queryPartition resolves the partition a query names; it answers 404 itself for an unknown one.
func (s *Server) queryPartition(w http.ResponseWriter, r *http.Request, names partitionNames) (*partition.Partition, bool) {
	key := partitionKey(r, names)
	p, ok := s.parts.Lookup(key)
	// The default partition is in every set; for Dynamo it exists only once created (recorded)
	// or holding state, as nothing pre-exists in Dynamo's indexer at start.
	if ok && !s.parts.Recorded(p.ID) && !s.e.PartitionHolds(p.ID) {
		ok = false
	}
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("%w for model=%s routing_group=%s", ErrNoPartition, key.ModelName, key.RoutingGroup).Error())
		return nil, false
	}
	return p, true
}

func (s *Server) postQuery(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TokenIDs  *[]uint32 `json:"token_ids"`
		LoraName  *string   `json:"lora_name"`
		CacheSalt *string   `json:"cache_salt"`
		partitionNames
	}
	if !s.decodeDynamo(w, r, &req) {
		return
	}
	switch {
	case req.TokenIDs == nil:
		missingField(w, "token_ids")
		return
	case req.ModelName == "":
		missingField(w, "model_name")
		return
	}
	p, ok := s.queryPartition(w, r, req.partitionNames)
	if !ok {
		return
	}
	deref := func(v *string) string {
		if v == nil {
			return ""
		}
		return *v
	}
	// cache_salt salts the block hash as Dynamo's cache_namespace does (docs/CONTRACT.md §2).
	s.answerQuery(w, p, event.BlockHashes(*req.TokenIDs, p.BlockSize, deref(req.LoraName), deref(req.CacheSalt)))
}

// parseI64Hashes reads Dynamo's i64 block hashes: a negative value is the two's complement of a
// u64 hash; values above 2^63-1 (kvindex's own u64 spelling) are taken as they are. A number in
// a JSON string ("42") is read as the number.
func parseI64Hashes(raw []json.RawMessage) ([]uint64, error) {
	out := make([]uint64, len(raw))
	for i, n := range raw {
		v := string(n)
		var quoted string
		if len(n) > 0 && n[0] == '"' && json.Unmarshal(n, &quoted) == nil {
			v = quoted
		}
		if strings.HasPrefix(v, "-") {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("field block_hashes[%d]: %s is not a 64-bit integer", i, v)
			}
			out[i] = uint64(x)
			continue
		}
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("field block_hashes[%d]: %s is not a 64-bit integer", i, v)
		}
		out[i] = x
	}
	return out, nil
}

func (s *Server) postQueryByHash(w http.ResponseWriter, r *http.Request) {
	var req struct {
		BlockHashes *[]json.RawMessage `json:"block_hashes"`
		CacheSalt   json.RawMessage    `json:"cache_salt"`
		partitionNames
	}
	if !s.decodeDynamo(w, r, &req) {
		return
	}
	switch {
	case req.BlockHashes == nil:
		missingField(w, "block_hashes")
		return
	case req.ModelName == "":
		missingField(w, "model_name")
		return
	}
	if len(req.CacheSalt) > 0 && !bytes.Equal(req.CacheSalt, []byte("null")) {
		writeError(w, http.StatusBadRequest, "cache_salt is not accepted by /query_by_hash; block_hashes must already include the intended cache salt")
		return
	}
	hashes, err := parseI64Hashes(*req.BlockHashes)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	p, ok := s.queryPartition(w, r, req.partitionNames)
	if !ok {
		return
	}
	s.answerQuery(w, p, hashes)
}

// dumpedPartitions are the partitions GET /dump lists: those with ranks or registrations.
func (s *Server) dumpedPartitions() []*partition.Partition {
	has := map[uint32]bool{}
	for _, st := range s.e.Status() {
		has[st.Rank.Partition] = true
	}
	for _, w := range s.e.Workers() {
		if len(w.Registrations) > 0 && w.Placed {
			has[w.Partition] = true
		}
	}
	var out []*partition.Partition
	for _, p := range s.parts.All() {
		if has[p.ID] {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out
}

// getDump answers {"<model>:<group>": {"block_size": n, "events": [RouterEvent…]}}: each
// partition's tree as Stored events in replay order (ids from 0 per rank), each rank read on its
// lane.
func (s *Server) getDump(w http.ResponseWriter, r *http.Request) {
	buf := []byte{'{'}
	for i, p := range s.dumpedPartitions() {
		if i > 0 {
			buf = append(buf, ',')
		}
		k, _ := json.Marshal(p.Key.String())
		buf = append(buf, k...)
		buf = append(buf, `:{"block_size":`...)
		buf = strconv.AppendInt(buf, int64(p.BlockSize), 10)
		buf = append(buf, `,"events":[`...)
		first := true
		for _, rk := range p.Tiers.Ranks() {
			var err error
			if buf, err = s.dumpRankJSON(r.Context(), rk, buf, &first); err != nil {
				s.submitError(w, err)
				return
			}
		}
		buf = append(buf, "]}"...)
	}
	buf = append(buf, "}\n"...)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
}

// dumpRankJSON appends the rank's state in every tier (events tagged with their tier) as
// comma-separated RouterEvent JSON, read on its lane.
func (s *Server) dumpRankJSON(ctx context.Context, rk event.Rank, dst []byte, first *bool) ([]byte, error) {
	err := s.e.DumpRank(ctx, rk, func(ev *event.RouterEvent) error {
		if !*first {
			dst = append(dst, ',')
		}
		*first = false
		dst = event.AppendJSON(dst, ev)
		return nil
	})
	return dst, err
}

// peerRequest is the body of /register_peer and /deregister_peer.
type peerRequest struct {
	URL *string `json:"url"`
}

func (s *Server) peerURL(w http.ResponseWriter, r *http.Request) (string, bool) {
	var req peerRequest
	if !s.decodeDynamo(w, r, &req) {
		return "", false
	}
	if req.URL == nil {
		missingField(w, "url")
		return "", false
	}
	if err := checkSourceURL(*req.URL); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return "", false
	}
	return strings.TrimRight(*req.URL, "/"), true
}

func (s *Server) postRegisterPeer(w http.ResponseWriter, r *http.Request) {
	u, ok := s.peerURL(w, r)
	if !ok {
		return
	}
	if err := s.peers.Register(r.Context(), u); err != nil {
		s.submitError(w, err)
		return
	}
	s.lg.Info("peer registered", "url", u)
	writeJSON(w, http.StatusCreated, statusOK)
}

func (s *Server) postDeregisterPeer(w http.ResponseWriter, r *http.Request) {
	u, ok := s.peerURL(w, r)
	if !ok {
		return
	}
	switch err := s.peers.Deregister(r.Context(), u); {
	case errors.Is(err, peers.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error()) // Dynamo's exact answer
		s.lg.Info("deregister_peer of an unknown peer", "url", u)
		return
	case err != nil:
		s.submitError(w, err)
		return
	}
	s.lg.Info("peer deregistered", "url", u)
	writeJSON(w, http.StatusOK, statusOK)
}

func (s *Server) getPeers(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.peers.List())
}
