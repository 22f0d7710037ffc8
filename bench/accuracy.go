package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	kvpart "github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/workload"
)

// ErrAccuracyNeedsTrace is returned by Run with Options.Accuracy on a workload dir: the true
// prefix hits of the simulated workers are not stored in one.
var ErrAccuracyNeedsTrace = errors.New("bench --accuracy: needs a trace (a workload dir does not store the workers' true hits)")

// Metrics of Options.Accuracy: the index's hit-prediction accuracy on the trace (engine
// RecordOutcomes, as POST /v1/outcomes). "exact" is with every event flowing (want 0 over- and 0
// under-predictions); "dropped" with the Removed events of AccuracyDropWorker lost.
const (
	MetricAccuracyOutcomes          = "accuracy_outcomes"
	MetricAccuracyExactRatio        = "accuracy_exact_ratio"
	MetricAccuracyOver              = "accuracy_over"
	MetricAccuracyUnder             = "accuracy_under"
	MetricAccuracyDroppedExactRatio = "accuracy_dropped_exact_ratio"
	MetricAccuracyDroppedOver       = "accuracy_dropped_over"
	MetricAccuracyDroppedOverBlocks = "accuracy_dropped_over_blocks"
	MetricAccuracyDroppedUnder      = "accuracy_dropped_under"
)

// AccuracyDropWorker is the worker whose Removed events the "dropped" run loses. Each loss is a
// gap in its event ids: the lanes record it lost and reset the rank (degraded), so the index then
// under-predicts that worker until it stores again, and the metric shows it.
const AccuracyDropWorker = 0

// accuracyStages is Run with Options.Accuracy: the stream is ingested in order and each query,
// once the events before it are applied, reports its outcome — the chosen worker's true prefix
// hit from the simulation — through engine.RecordOutcomes. Twice: with every event, then with
// AccuracyDropWorker's Removed events dropped (a lost event stream).
func (r *run) accuracyStages(ctx context.Context) error {
	if r.o.WorkloadDir != "" {
		return ErrAccuracyNeedsTrace
	}
	exact, err := r.accuracyRun(ctx, filepath.Join(r.dir, "exact"), false)
	if err != nil {
		return err
	}
	dropped, err := r.accuracyRun(ctx, filepath.Join(r.dir, "dropped"), true)
	if err != nil {
		return err
	}
	ratio := func(a engine.Accuracy) float64 {
		if a.Outcomes == 0 {
			return 0
		}
		return float64(a.Exact) / float64(a.Outcomes)
	}
	r.rep.add(MetricAccuracyOutcomes, float64(exact.Outcomes), UnitCount)
	r.rep.add(MetricAccuracyExactRatio, ratio(exact), UnitRatio)
	r.rep.add(MetricAccuracyOver, float64(exact.Over), UnitCount)
	r.rep.add(MetricAccuracyUnder, float64(exact.Under), UnitCount)
	r.rep.add(MetricAccuracyDroppedExactRatio, ratio(dropped), UnitRatio)
	r.rep.add(MetricAccuracyDroppedOver, float64(dropped.Over), UnitCount)
	r.rep.add(MetricAccuracyDroppedOverBlocks, float64(dropped.OverBlocks), UnitCount)
	r.rep.add(MetricAccuracyDroppedUnder, float64(dropped.Under), UnitCount)
	r.lg.Info("bench: accuracy", "outcomes", exact.Outcomes, "exact", exact.Exact, "over", exact.Over, "under", exact.Under,
		"dropped_exact", dropped.Exact, "dropped_over", dropped.Over, "dropped_under", dropped.Under)
	return nil
}

func (r *run) accuracyRun(ctx context.Context, dir string, drop bool) (engine.Accuracy, error) {
	cfg := r.engineConfig()
	cfg.DataDir, cfg.Durability = dir, engine.NoSync // outcomes need no fsync; neither does this replay
	s, err := engine.Open(cfg)
	if err != nil {
		return engine.Accuracy{}, fmt.Errorf("bench: open: %w", err)
	}
	defer s.Close()
	if err := s.Recover(ctx, nil); err != nil {
		return engine.Accuracy{}, fmt.Errorf("bench: recover: %w", err)
	}
	key := kvpart.Default
	rd := r.st.Reader()
	var batch []event.RouterEvent
	ingest := func(qi int, evs []event.RouterEvent) error {
		batch = batch[:0]
		for _, ev := range evs {
			if drop && ev.WorkerID == AccuracyDropWorker && ev.Kind == event.KindRemoved {
				continue
			}
			batch = append(batch, ev)
		}
		if len(batch) == 0 {
			return nil
		}
		if _, err := s.Ingest(ctx, key, batch); err != nil {
			return fmt.Errorf("bench: accuracy: ingest before query %d: %w", qi, err)
		}
		return nil
	}
	qi := 0
	for {
		ch, ok := rd.Next(chunkEvents, true)
		if !ok {
			break
		}
		next := 0 // events of the chunk ingested
		for i := range ch.Queries {
			q := &ch.Queries[i]
			if qi%1024 == 0 && ctx.Err() != nil {
				return engine.Accuracy{}, ctx.Err()
			}
			upto := q.AfterEvent - ch.FirstEvent
			if err := ingest(qi, ch.Events[next:upto]); err != nil {
				return engine.Accuracy{}, err
			}
			next = upto
			if err := r.outcome(s, key, qi, q); err != nil {
				return engine.Accuracy{}, err
			}
			qi++
		}
		if err := ingest(qi, ch.Events[next:]); err != nil {
			return engine.Accuracy{}, err
		}
	}
	for _, a := range s.Accuracies() {
		return a, nil
	}
	return engine.Accuracy{}, nil
}

// outcome posts query qi's true prefix hit on its chosen worker (nothing to compare before the
// partition or the worker's rank exists).
func (r *run) outcome(s *engine.Engine, key kvpart.Key, qi int, q *workload.Query) error {
	if len(q.BlockHashes) == 0 || q.Worker < 0 {
		return nil
	}
	p, ok := s.Partitions().Lookup(key)
	if !ok {
		return nil // nothing ingested yet: no rank to compare
	}
	bs := uint64(p.BlockSize)
	_, err := s.RecordOutcomes([]engine.Outcome{{Key: key, Rank: event.Rank{WorkerID: uint64(q.Worker)},
		Hashes: q.BlockHashes, CachedTokens: uint64(q.Hit) * bs}})
	if errors.Is(err, engine.ErrBadOutcome) {
		return nil // the chosen worker has no rank yet (its first request): nothing to compare
	}
	if err != nil {
		return fmt.Errorf("bench: accuracy: outcome of query %d: %w", qi, err)
	}
	return nil
}
