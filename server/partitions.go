package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/lanes"
	"github.com/kvindex/kvindex/partition"
)

// Partitions (SPEC §9): every /v1 route takes model_name / routing_group (tenant_id when
// routing_group is absent) as query parameters, or as body fields where there is a JSON body;
// without them a route is the default partition. Reads never create a partition: an unknown one
// answers as empty. Writes create it (block size = --block-size).

// partitionParams are the query parameters that name a partition.
var partitionParams = []string{"model_name", "routing_group", "tenant_id"}

// partitionNames are the body fields that name a partition (embedded in request bodies).
type partitionNames struct {
	ModelName    string `json:"model_name"`
	RoutingGroup string `json:"routing_group"`
	TenantID     string `json:"tenant_id"`
}

// partitionKey reads the partition of a request: body names win over query parameters.
func partitionKey(r *http.Request, body partitionNames) partition.Key {
	q := r.URL.Query()
	pick := func(b, name string) string {
		if b != "" {
			return b
		}
		return q.Get(name)
	}
	return partition.KeyOf(pick(body.ModelName, "model_name"), pick(body.RoutingGroup, "routing_group"), pick(body.TenantID, "tenant_id"))
}

// namesPartition reports whether the request names a partition in its query.
func namesPartition(r *http.Request) bool {
	q := r.URL.Query()
	for _, n := range partitionParams {
		if q.Has(n) {
			return true
		}
	}
	return false
}

// rankPartition resolves the partition of a rank named by worker in a path: the partition the
// query names, else the worker's own (a worker belongs to one partition), else the default.
// ok is false for a named partition that does not exist.
func (s *Server) rankPartition(r *http.Request, worker uint64) (uint32, bool) {
	if namesPartition(r) {
		p, ok := s.parts.Lookup(partitionKey(r, partitionNames{}))
		if !ok {
			return 0, false
		}
		return p.ID, true
	}
	if id, ok := s.parts.WorkerPartition(worker); ok {
		return id, true
	}
	return 0, true
}

// writePartition returns the partition a write goes to, creating it when needed, and claims
// every worker of evs for it (a worker in another partition → 409 naming the event's index).
// It sets evs[i].Partition. It answers the error itself and returns false.
func (s *Server) writePartition(ctx context.Context, w http.ResponseWriter, key partition.Key, evs []event.RouterEvent) bool {
	if i, err := s.assignPartition(ctx, key, evs); err != nil {
		s.partitionError(w, err, i)
		return false
	}
	return true
}

// assignPartition puts evs in key's partition (created when needed) and claims their workers for
// it. A worker of another partition fails the whole batch before anything is claimed: the error
// (partition.ErrWorkerElsewhere) comes with the index of its first event; -1 for other errors.
func (s *Server) assignPartition(ctx context.Context, key partition.Key, evs []event.RouterEvent) (int, error) {
	p, err := s.parts.Ensure(ctx, key, 0)
	if err != nil {
		return -1, err
	}
	for i := range evs {
		if id, ok := s.parts.WorkerPartition(evs[i].WorkerID); ok && id != p.ID {
			return i, s.parts.Claim(evs[i].WorkerID, p.ID)
		}
	}
	for i := range evs {
		evs[i].Partition = p.ID
		if err := s.parts.Claim(evs[i].WorkerID, p.ID); err != nil {
			return i, err
		}
	}
	return -1, nil
}

// Ingest is the write path of POST /v1/events without HTTP (the library, kvindex.DB): the batch
// goes to key's partition, then through the lanes (log → lane → tree); it returns once every
// accepted event is durable and applied. evs must be validated (event.Validate) by the caller.
func (s *Server) Ingest(ctx context.Context, key partition.Key, evs []event.RouterEvent) (lanes.Result, error) {
	if _, err := s.assignPartition(ctx, key, evs); err != nil {
		return lanes.Result{}, err
	}
	return s.pipe.Submit(ctx, evs)
}

// FindMatches answers a find_matches in key's partition (event-fed and side scores merged), as
// POST /v1/find_matches does; an unknown partition answers nothing.
func (s *Server) FindMatches(dst []index.Score, key partition.Key, hashes []uint64, earlyExit bool) []index.Score {
	p, ok := s.parts.Lookup(key)
	if !ok {
		return dst[:0]
	}
	buf := scoreBufs.Get().(*scoreBuf)
	defer scoreBufs.Put(buf)
	return append(dst[:0], s.scoresOf(buf, p, hashes, earlyExit, false)...)
}

// Flush returns once every event accepted before the call is applied and approximate blocks due
// now are removed (POST /v1/flush).
func (s *Server) Flush(ctx context.Context) error {
	if err := s.pipe.Flush(ctx); err != nil {
		return err
	}
	return s.approx.Flush(ctx)
}

func (s *Server) partitionError(w http.ResponseWriter, err error, index int) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, partition.ErrBadName):
		code = http.StatusBadRequest
	case errors.Is(err, partition.ErrWorkerElsewhere), errors.Is(err, partition.ErrBlockSizeMismatch):
		code = http.StatusConflict
	default:
		s.submitError(w, err)
		return
	}
	if index >= 0 {
		writeJSON(w, code, map[string]any{"error": err.Error(), "index": index})
		return
	}
	writeError(w, code, err.Error())
}

// claimWorkers rebuilds which partition each worker belongs to from the ranks the replay found.
func (s *Server) claimWorkers() {
	for _, st := range s.pipe.Status() {
		if err := s.parts.Claim(st.Rank.WorkerID, st.Rank.Partition); err != nil {
			s.lg.Warn("a worker has ranks in two partitions (data written before partitions were enforced)",
				"worker_id", st.Rank.WorkerID, "err", err)
		}
	}
}
