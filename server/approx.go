package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/kvindex/kvindex/approx"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
)

// postRoutingDecision serves POST /v1/routing_decisions (approximate mode, SPEC §8): the router
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
	probe := []event.RouterEvent{{WorkerID: rk.WorkerID, DPRank: rk.DPRank}}
	if !s.writePartition(ctx, w, partitionKey(r, req.partitionNames), probe) {
		return
	}
	rk.Partition = probe[0].Partition
	d := approx.Decision{Rank: rk}
	if req.Tokens != nil {
		p := s.parts.Get(rk.Partition)
		d.LocalHashes = event.BlockHashes(*req.Tokens, p.BlockSize, req.LoraName, req.CacheNamespace)
	} else {
		d.LocalHashes = *req.BlockHashes
		if req.SequenceHashes != nil {
			d.SeqHashes = *req.SequenceHashes
		}
	}
	n, deadline, err := s.approx.Record(ctx, d)
	if err != nil {
		if errors.Is(err, approx.ErrBadDecision) {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		s.submitError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"recorded": n, "expires_at": deadline.UTC().Format("2006-01-02T15:04:05.000Z07:00")})
}

// scoresOf answers a find_matches in partition p (nil: unknown, no scores): the event-fed
// tree's scores, each rank raised to its side score where that is higher (SPEC §8).
// With wantPath it also records in buf.path the block hash matched at each depth, which only the
// tier walk needs; find_matches without lower-tier blocks takes the plain walk.
func (s *Server) scoresOf(buf *scoreBuf, p *partition.Partition, hashes []uint64, earlyExit, wantPath bool) []index.Score {
	buf.scores, buf.path = buf.scores[:0], buf.path[:0]
	if p == nil {
		return buf.scores
	}
	if wantPath {
		buf.scores, buf.path = p.Index.FindMatchesPath(buf.scores, buf.path, hashes, earlyExit)
	} else {
		buf.scores = p.Index.FindMatchesInto(buf.scores, hashes, earlyExit)
	}
	buf.side = s.approx.Scores(buf.side[:0], p.ID, hashes, earlyExit)
	if len(buf.side) == 0 {
		return buf.scores
	}
	buf.merged = approx.Merge(buf.merged, buf.scores, buf.side)
	return buf.merged
}

// approxTTL is the side index's TTL option from the config.
func (c *Config) approxOptions() approx.Options {
	o := approx.Options{TTL: c.ApproxTTL, MaxBlocks: c.ApproxMaxBlocks, Now: c.Now, Logger: c.Logger}
	if c.ApproxTTLZero {
		o.TTL, o.TTLIsZero = 0, true
	}
	return o
}

// eventFedMode is the /v1/ranks mode of an event-fed rank: mixed when it also has side entries
// (a rank with side entries only is "approximate").
func eventFedMode(side int) string {
	if side > 0 {
		return "mixed"
	}
	return "events"
}

// RecordDecision is the write path of POST /v1/routing_decisions without HTTP (the library,
// bench --approximate): the request's prefix — local hashes, and sequence hashes (nil: SPEC §2's
// chain) — went to rank in key's partition. The rank is claimed for the partition (created when
// needed), then the decision goes through approx.Set.Record: logged through the rank's lane,
// applied to the side index, acknowledged once durable. It returns the blocks recorded and
// their deadline.
func (s *Server) RecordDecision(ctx context.Context, key partition.Key, rank event.Rank, local, seq []uint64) (int, time.Time, error) {
	probe := []event.RouterEvent{{WorkerID: rank.WorkerID, DPRank: rank.DPRank}}
	if _, err := s.assignPartition(ctx, key, probe); err != nil {
		return 0, time.Time{}, err
	}
	rank.Partition = probe[0].Partition
	return s.approx.Record(ctx, approx.Decision{Rank: rank, LocalHashes: local, SeqHashes: seq})
}

// ApproxBlocks returns the live side entries of key's partition (0 for an unknown partition).
func (s *Server) ApproxBlocks(key partition.Key) int {
	p, ok := s.parts.Lookup(key)
	if !ok {
		return 0
	}
	return s.approx.Blocks(p.ID)
}

// ApproxExpired returns the side blocks removed at their deadline since Open (TTL expiry).
func (s *Server) ApproxExpired() uint64 { return s.approx.Expired.Load() }
