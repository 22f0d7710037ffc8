package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	kvpart "github.com/kvindex/kvindex/partition"
)

// ErrNoDecisions is returned by Run with Options.Approximate for a workload whose queries do not
// say which worker each request was routed to (a workload dir written without "worker").
var ErrNoDecisions = errors.New("bench --approximate: the workload has no routing decisions")

// Metrics of Options.Approximate (issue 14: approximate mode fed by the trace's routing decisions).
const (
	MetricApproxDecisions     = "approx_decisions"       // routing decisions recorded (non-empty queries)
	MetricApproxDecisionsPerS = "approx_decisions_per_s" // decisions ÷ the time spent in RecordDecision
	MetricApproxBlocksPerS    = "approx_blocks_per_s"    // blocks of those decisions ÷ the same time
	MetricApproxSideBlocks    = "approx_side_blocks"     // live (rank, block) side entries after the run
	MetricApproxExpired       = "approx_expired"         // side blocks expired during the run (want 0: see --approx-ttl)
	// Σ best side-index score ÷ Σ query blocks, each query scored before its own decision is
	// recorded: the prefix the router would predict from its decisions alone.
	MetricApproxHitRatio = "approx_hit_ratio"
	// The same with the score of the worker the request was actually routed to.
	MetricApproxChosenHitRatio = "approx_chosen_hit_ratio"
)

// approxStages is Run with Options.Approximate: no events are ingested; each query, in workload
// order, is scored on the side index (engine.Find: event-fed and side scores merged, the
// event tree stays empty), then its routing decision — its worker, its block hashes — is recorded
// through engine.RecordDecision (the POST /v1/routing_decisions path: rank's lane, log, side
// index). One decision at a time: each query must see every decision before it.
func (r *run) approxStages(ctx context.Context) error {
	asked := 0
	for i := range r.st.Queries() {
		q := r.st.Query(i)
		if q.Worker < 0 {
			return fmt.Errorf("bench: %w: query %d names no worker (regenerate the workload dir with this version)", ErrNoDecisions, i)
		}
		asked += len(q.BlockHashes)
	}
	cfg := r.engineConfig()
	cfg.ApproxTTL = r.o.ApproxTTL
	s, err := engine.Open(cfg)
	if err != nil {
		return fmt.Errorf("bench: open: %w", err)
	}
	defer s.Close()
	if err := s.Recover(ctx, nil); err != nil {
		return fmt.Errorf("bench: recover: %w", err)
	}
	nq := r.st.NonEmptyQueries()
	r.lg.Info("bench: approximate mode: score, then record each routing decision", "decisions", nq, "ttl", cfg.ApproxTTL)
	bar := r.bar("decisions", nq)
	var (
		key               = kvpart.Default
		dst               []engine.Score
		recording         time.Duration
		lat               = make([]time.Duration, 0, nq)
		best, chosen, blk int
	)
	for i := range nq {
		if i%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		qi := r.st.NonEmpty(i)
		q := r.st.Query(qi)
		t := time.Now()
		dst = s.Find(dst, key, engine.Query{Hashes: q.BlockHashes})
		lat = append(lat, time.Since(t))
		if len(dst) > 0 {
			best += int(dst[0].Score)
		}
		for _, sc := range dst {
			if sc.WorkerID == uint64(q.Worker) && sc.DPRank == 0 {
				chosen += int(sc.Score)
				break
			}
		}
		t = time.Now()
		n, _, err := s.RecordDecision(ctx, key, event.Rank{WorkerID: uint64(q.Worker)}, q.BlockHashes, nil)
		recording += time.Since(t)
		if err != nil {
			return fmt.Errorf("bench: recording the decision of query %d: %w", qi, err)
		}
		blk += n
		if bar != nil {
			_ = bar.Add(1)
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	slices.Sort(lat)
	r.rep.add(MetricQueries, float64(nq), UnitCount)
	r.rep.add(MetricApproxDecisions, float64(nq), UnitCount)
	if recording > 0 {
		r.rep.add(MetricApproxDecisionsPerS, float64(nq)/recording.Seconds(), UnitRate)
		r.rep.add(MetricApproxBlocksPerS, float64(blk)/recording.Seconds(), UnitRate)
	}
	side := 0
	if p, ok := s.Partitions().Lookup(key); ok {
		side = s.Approx().Blocks(p.ID)
	}
	r.rep.add(MetricApproxSideBlocks, float64(side), UnitCount)
	r.rep.add(MetricApproxExpired, float64(s.Approx().Expired.Load()), UnitCount)
	if n := s.Approx().Expired.Load(); n > 0 {
		r.lg.Warn("bench: approximate blocks expired during the run: the hit ratio is that of a TTL shorter than the run (raise --approx-ttl)", "blocks", n, "ttl", cfg.ApproxTTL)
	}
	r.rep.add(MetricFindMatchesP50, float64(Percentile(lat, 0.50)), UnitNS)
	r.rep.add(MetricFindMatchesP99, float64(Percentile(lat, 0.99)), UnitNS)
	r.rep.add(MetricFindMatchesP999, float64(Percentile(lat, 0.999)), UnitNS)
	if asked > 0 {
		r.rep.add(MetricApproxHitRatio, float64(best)/float64(asked), UnitRatio)
		r.rep.add(MetricApproxChosenHitRatio, float64(chosen)/float64(asked), UnitRatio)
	}
	r.lg.Info("bench: approximate mode done", "decisions", nq, "recording_ms", recording.Milliseconds())
	return nil
}
