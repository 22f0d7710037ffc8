package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/partition"
)

// Partitions (docs/CONTRACT.md §9): every /v1 route takes model_name / routing_group (tenant_id is accepted
// and ignored, as Dynamo ignores it) as query parameters, or as body fields where there is a JSON body;
// without them a route is the default partition. Reads never create a partition: an unknown one
// answers as empty. Writes create it (block size = --block-size).

// partitionParams are the query parameters a route that takes a partition accepts (tenant_id is
// accepted and names nothing).
var partitionParams = []string{"model_name", "routing_group", "tenant_id"}

// partitionNames are the body fields that name a partition (embedded in request bodies);
// TenantID is accepted and ignored.
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
	return partition.KeyOf(pick(body.ModelName, "model_name"), pick(body.RoutingGroup, "routing_group"), "")
}

// namesPartition reports whether the request names a partition in its query.
func namesPartition(r *http.Request) bool {
	q := r.URL.Query()
	for _, n := range []string{"model_name", "routing_group"} {
		if q.Has(n) {
			return true
		}
	}
	return false
}

// rankPartition resolves the partition of a rank named by worker in a path: the one the query
// names when the worker is unknown or of it, else the worker's own (a worker belongs to one
// partition), else the default. ok is false for a named partition that does not exist or is
// not the worker's (docs/CONTRACT.md §9: such a route answers as for an unknown rank).
func (s *Server) rankPartition(r *http.Request, worker uint64) (uint32, bool) {
	return s.e.WorkerPartition(worker, namedKey(r))
}

// workerPartition is the partition worker is placed in (the engine's worker record).
func (s *Server) workerPartition(worker uint64) (uint32, bool) {
	w, _ := s.e.Worker(worker)
	return w.Partition, w.Placed
}

// namedKey is the partition the request's query names, nil when it names none.
func namedKey(r *http.Request) *partition.Key {
	if !namesPartition(r) {
		return nil
	}
	k := partitionKey(r, partitionNames{})
	return &k
}

// ingestError answers a refused or failed write: placement refusals (409 naming the event's
// index, 400 for a bad name or event) and lane errors.
func (s *Server) ingestError(w http.ResponseWriter, err error) {
	var pe *engine.PlaceError
	if !errors.As(err, &pe) {
		s.submitError(w, err)
		return
	}
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, partition.ErrBadName), errors.Is(err, engine.ErrInvalidEvent):
		code = http.StatusBadRequest
	case errors.Is(err, partition.ErrWorkerElsewhere), errors.Is(err, partition.ErrBlockSizeMismatch):
		code = http.StatusConflict
	default:
		s.submitError(w, pe.Err)
		return
	}
	msg := err.Error()
	if fix, ok := elsewhereFix(err); ok {
		msg = fix
	}
	if pe.Index >= 0 {
		writeJSON(w, code, map[string]any{"error": msg, "index": pe.Index})
		return
	}
	writeError(w, code, msg)
}

// elsewhereFix words a refusal of a worker of another partition (partition.ElsewhereError) with
// the two ways out: write into the worker's partition, or remove the worker first.
func elsewhereFix(err error) (string, bool) {
	var ee *partition.ElsewhereError
	if !errors.As(err, &ee) {
		return "", false
	}
	q := url.Values{"model_name": {ee.Have.ModelName}}
	if ee.Have.RoutingGroup != partition.DefaultName {
		q.Set("routing_group", ee.Have.RoutingGroup)
	}
	return fmt.Sprintf("worker %d has ranks in partition model_name=%s routing_group=%s, and a worker belongs to one partition: "+
		"post with ?%s, or remove the worker first (DELETE /v1/workers/%d)",
		ee.Worker, ee.Have.ModelName, ee.Have.RoutingGroup, q.Encode(), ee.Worker), true
}

// partitionError answers a placement error that is not an engine.PlaceError.
func (s *Server) partitionError(w http.ResponseWriter, err error, index int) {
	s.ingestError(w, &engine.PlaceError{Index: index, Err: err})
}
