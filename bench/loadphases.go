package bench

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/workload"
)

// PhaseMetric names a metric of the phase at pct % of the unpaced rate (LoadOptions.Phases):
// loadgen_at_<pct>pct_<what>, what one of the PhaseWhat* below.
func PhaseMetric(pct int, what string) string { return fmt.Sprintf("loadgen_at_%dpct_%s", pct, what) }

// What each phase reports (PhaseMetric).
const (
	PhaseTargetRate = "target_events_per_s" // the pace asked (0: unpaced)
	PhaseEventsPerS = "events_per_s"        // the pace reached
	PhaseFindP50    = "find_matches_p50_ns"
	PhaseFindP99    = "find_matches_p99_ns"
	PhaseHealthzP50 = "healthz_p50_ns"
	PhaseHealthzP99 = "healthz_p99_ns"
	PhaseQueries    = "find_matches" // calls answered
	PhaseRetried    = "retried_429"  // batches posted again after a 429
)

// loadPhases runs the stream once per phase of o.Phases: the 100 % phase first and unpaced (it
// is the reference rate; added when not asked for), then the others in the order given, each
// paced at its percentage of the rate the unpaced phase reached. Phase k posts the stream with
// every worker id shifted by k × (the stream's largest worker id + 1), so its events are new to
// the server (none stale or duplicate) and its index grows as the first phase's did.
func loadPhases(ctx context.Context, o LoadOptions, hc *http.Client, base string, queries []workload.Query, evs []event.RouterEvent) (*Report, error) {
	phases := []int{100}
	for _, p := range o.Phases {
		if !slices.Contains(phases, p) {
			phases = append(phases, p)
		}
	}
	var span uint64
	for i := range evs {
		span = max(span, evs[i].WorkerID+1)
	}
	rep := &Report{}
	var unpaced float64
	for k, pct := range phases {
		rate := 0.0
		if pct < 100 {
			rate = unpaced * float64(pct) / 100
		}
		res, posted, retried, err := loadPhase(ctx, o, hc, base, queries, shiftWorkers(evs, uint64(k)*span), rate)
		if err != nil {
			return nil, fmt.Errorf("phase %d %%: %w", pct, err)
		}
		reached := float64(posted) / res.took.Seconds()
		if pct == 100 {
			unpaced = reached
		}
		o.Logger.Info("loadgen: phase done", "pct", pct, "target_events_per_s", rate, "events_per_s", reached,
			"find_matches_p99_ns", Percentile(res.lat, 0.99), "healthz_p99_ns", Percentile(res.health, 0.99))
		rep.add(PhaseMetric(pct, PhaseTargetRate), rate, UnitRate)
		rep.add(PhaseMetric(pct, PhaseEventsPerS), reached, UnitRate)
		rep.add(PhaseMetric(pct, PhaseQueries), float64(len(res.lat)), UnitCount)
		rep.add(PhaseMetric(pct, PhaseRetried), float64(retried), UnitCount)
		rep.add(PhaseMetric(pct, PhaseFindP50), float64(Percentile(res.lat, 0.50)), UnitNS)
		rep.add(PhaseMetric(pct, PhaseFindP99), float64(Percentile(res.lat, 0.99)), UnitNS)
		rep.add(PhaseMetric(pct, PhaseHealthzP50), float64(Percentile(res.health, 0.50)), UnitNS)
		rep.add(PhaseMetric(pct, PhaseHealthzP99), float64(Percentile(res.health, 0.99)), UnitNS)
	}
	return rep, nil
}

// loadPhase posts evs once at rate (0: unpaced) with the querier beside, within o.Duration.
func loadPhase(ctx context.Context, o LoadOptions, hc *http.Client, base string, queries []workload.Query, evs []event.RouterEvent, rate float64) (posting, int64, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	r := newLoadRun(ctx, cancel, o, hc, base, queries)
	res, err := r.post(evs, nil, rate, -1)
	return res, r.posted.Load(), r.retried.Load(), err
}

// shiftWorkers returns evs with every worker id raised by by (evs itself when by is 0).
func shiftWorkers(evs []event.RouterEvent, by uint64) []event.RouterEvent {
	if by == 0 {
		return evs
	}
	out := slices.Clone(evs)
	for i := range out {
		out[i].WorkerID += by
	}
	return out
}
