package server

import (
	"errors"
	"net/http"
	"time"

	"github.com/kvindex/kvindex/approx"
	"github.com/kvindex/kvindex/event"
)

// postRoutingDecision serves POST /v1/routing_decisions (approximate mode, docs/CONTRACT.md §8): the router
// sent a request's prefix to a rank; the rank is assumed to cache it for --approx-ttl. Answered
// once the decision is durable and applied to the partition's side index.
func (s *Server) postRoutingDecision(w http.ResponseWriter, r *http.Request) {
	body, _, ok := s.readBody(w, r, bodyJSON)
	if !ok {
		return
	}
	var req struct {
		WorkerID       *uint64   `json:"worker_id"`
		DPRank         uint32    `json:"dp_rank"`
		BlockHashes    *[]uint64 `json:"block_hashes"`
		SequenceHashes *[]uint64 `json:"sequence_hashes"`
		Tokens         *[]uint32 `json:"tokens"`
		LoraName       string    `json:"lora_name"`
		CacheNamespace string    `json:"cache_namespace"`
		partitionNames
	}
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	switch {
	case req.WorkerID == nil:
		writeError(w, http.StatusBadRequest, "missing field worker_id")
		return
	case (req.BlockHashes == nil) == (req.Tokens == nil):
		writeError(w, http.StatusBadRequest, "give exactly one of block_hashes and tokens")
		return
	case req.Tokens != nil && req.SequenceHashes != nil:
		writeError(w, http.StatusBadRequest, "sequence_hashes goes with block_hashes, not tokens")
		return
	}
	ctx := r.Context()
	rk := event.Rank{WorkerID: *req.WorkerID, DPRank: req.DPRank}
	key := partitionKey(r, req.partitionNames)
	var (
		n        int
		deadline time.Time
		err      error
	)
	if req.Tokens != nil {
		n, deadline, err = s.e.RecordDecisionTokens(ctx, key, rk, *req.Tokens, req.LoraName, req.CacheNamespace)
	} else {
		var seq []uint64
		if req.SequenceHashes != nil {
			seq = *req.SequenceHashes
		}
		n, deadline, err = s.e.RecordDecision(ctx, key, rk, *req.BlockHashes, seq)
	}
	if err != nil {
		if errors.Is(err, approx.ErrBadDecision) {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		s.ingestError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"recorded": n, "expires_at": rfc3339(deadline)})
}
