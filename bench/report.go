package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/kvindex/kvindex/index"
)

// Metric names required by docs/BENCHMARKS.md (tools read them: never rename).
const (
	MetricEvents                 = "events"
	MetricBlocks                 = "blocks"
	MetricIngestEventsPerS       = "ingest_events_per_s"
	MetricIngestBlocksPerS       = "ingest_blocks_per_s"
	MetricMemoryIngestBlocksPerS = "memory_ingest_blocks_per_s"
	MetricPebbleCeilingEventsPS  = "pebble_ceiling_events_per_s"
	MetricIngestVsCeiling        = "ingest_vs_ceiling"
	// MetricIngestVsLimit is the pipeline against its slowest stage: ingest_events_per_s ÷
	// min(pebble_ceiling_events_per_s, memory_ingest_events_per_s) (docs/BENCHMARKS.md).
	MetricIngestVsLimit        = "ingest_vs_limit"
	MetricFindMatchesP50       = "find_matches_p50_ns"
	MetricFindMatchesP99       = "find_matches_p99_ns"
	MetricFindMatchesP999      = "find_matches_p999_ns"
	MetricFindMatchesLoadedP99 = "find_matches_loaded_p99_ns"
	MetricRestartSeconds       = "restart_seconds"
	MetricRestartBlocksPerS    = "restart_blocks_per_s"
	MetricHeapBytesPerBlock    = "heap_bytes_per_block"
	MetricWALBytesPerEvent     = "wal_bytes_per_event"
	MetricRoutingHitRatio      = "routing_hit_ratio"
)

// Extra metrics (not required by docs/BENCHMARKS.md; they explain the required ones).
const (
	MetricQueries              = "queries"                    // non-empty queries timed per pass
	MetricLoadedIngestEventsPS = "loaded_ingest_events_per_s" // what the loaded phase achieved
	MetricLoadedQueries        = "find_matches_loaded_calls"  // queries timed under load
	MetricMemoryIngestEventsPS = "memory_ingest_events_per_s" // baseline (a) in events
	// MetricIngestVsMemory is durable ingest against in-memory apply, whatever bounds it:
	// ingest_events_per_s ÷ memory_ingest_events_per_s (issue 25: ≥ 0.5 at --batch 64).
	MetricIngestVsMemory = "ingest_vs_memory"
	MetricIndexEntries   = "index_entries" // (rank, block) entries after stage 2
	// Bytes the ingest (stage 2) put into Pebble's WAL per event: log records, cursors and the
	// online checkpoints (serve --checkpoint-ratio), which wal_bytes_per_event does not see.
	MetricWALBytesInPerEvent = "wal_bytes_in_per_event"
	// Snapshot bytes on disk per event after stage 2 (the 'S' key range, like wal_bytes_per_event).
	MetricSnapshotBytesPerEvent = "snapshot_bytes_per_event"
	// The tier walk (docs/CONTRACT.md §7), on the same queries as find_matches_p50/p99: device walk plus the
	// host_pinned → disk → external walk (with --host-blocks the workload offloads evictions).
	MetricTierEntries          = "tier_entries"               // (rank, edge) entries of the lower tiers after stage 2
	MetricFindMatchesTieredP50 = "find_matches_tiered_p50_ns" // find_matches with the tier walk
	MetricFindMatchesTieredP99 = "find_matches_tiered_p99_ns"
	MetricTierExtendedQueries  = "tier_extended_queries_ratio" // queries where a lower tier extends some rank
	// GC cycles completed while the find_matches phases ran (issue 17): a query never allocates,
	// but a collection running beside it takes a core and the caches, which is where the
	// p99/p999 of an idle index come from when the machine is otherwise quiet.
	MetricFindMatchesGCCycles       = "find_matches_gc_cycles"        // during the idle phase (find_matches_p50/p99/p999)
	MetricFindMatchesLoadedGCCycles = "find_matches_loaded_gc_cycles" // during the loaded phase
	// Stage 3's idle pass again in stage 4: on the index just before the restart (it also holds
	// the loaded stage's copy), then on the rebuilt one (same entries, same answers; the replay
	// lays the nodes out rank by rank instead of in the stream's interleaved order).
	MetricFindMatchesPreRestartP50  = "find_matches_prerestart_p50_ns"
	MetricFindMatchesPreRestartP99  = "find_matches_prerestart_p99_ns"
	MetricFindMatchesPreRestartP999 = "find_matches_prerestart_p999_ns"
	MetricFindMatchesRestartedP50   = "find_matches_restarted_p50_ns"
	MetricFindMatchesRestartedP99   = "find_matches_restarted_p99_ns"
	MetricFindMatchesRestartedP999  = "find_matches_restarted_p999_ns"
)

// RequiredMetrics lists docs/BENCHMARKS.md's required metric names in the order of its table.
var RequiredMetrics = []string{
	MetricEvents, MetricBlocks, MetricIngestEventsPerS, MetricIngestBlocksPerS,
	MetricMemoryIngestBlocksPerS, MetricPebbleCeilingEventsPS, MetricIngestVsCeiling, MetricIngestVsLimit,
	MetricFindMatchesP50, MetricFindMatchesP99, MetricFindMatchesP999, MetricFindMatchesLoadedP99,
	MetricRestartSeconds, MetricRestartBlocksPerS, MetricHeapBytesPerBlock, MetricWALBytesPerEvent,
	MetricRoutingHitRatio,
}

// Units.
const (
	UnitCount = "count"
	UnitRate  = "1/s"
	UnitRatio = "ratio"
	UnitNS    = "ns"
	UnitSec   = "s"
	UnitBytes = "bytes"
	// UnitBytesPerMin is a rate of growth (rss_slope_bytes_per_min).
	UnitBytesPerMin = "bytes/min"
)

// Metric is one measured number: the JSON line {"metric": Name, "value": Value, "unit": Unit}.
type Metric struct {
	Name  string  `json:"metric"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// Report is the outcome of a run: its metrics in the order they were measured.
type Report struct {
	Metrics []Metric
}

func (r *Report) add(name string, v float64, unit string) {
	r.Metrics = append(r.Metrics, Metric{Name: name, Value: v, Unit: unit})
}

// Get returns the metric's value; ok is false when the run did not measure it.
func (r *Report) Get(name string) (v float64, ok bool) {
	for _, m := range r.Metrics {
		if m.Name == name {
			return m.Value, true
		}
	}
	return 0, false
}

// WriteJSON writes one JSON object per metric and line.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	for _, m := range r.Metrics {
		if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
			m.Value = 0 // JSON has no NaN; only a ratio over a zero rate gets here
		}
		if err := enc.Encode(m); err != nil {
			return fmt.Errorf("bench: writing JSON: %w", err)
		}
	}
	return nil
}

// WriteTable writes the metrics as an aligned table for people.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "metric\tvalue\tunit\t\n")
	for _, m := range r.Metrics {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", m.Name, FormatValue(m.Value), m.Unit)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: writing table: %w", err)
	}
	return nil
}

// FormatValue prints integers without decimals, large values with thousands separators, and
// small fractional values with 3 significant decimals.
func FormatValue(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'f', -1, 64)
	case math.Abs(v) >= 1000 || v == math.Trunc(v):
		return groupThousands(strconv.FormatFloat(math.Round(v), 'f', 0, 64))
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

func groupThousands(s string) string {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// Percentile returns the nearest-rank p-quantile (0 < p ≤ 1) of sorted latencies, 0 when there
// are none.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ErrScoresDiffer is returned (wrapped in a *MismatchError) when a query's scores after the
// restart differ from its scores before it.
var ErrScoresDiffer = errors.New("scores differ after restart")

// MismatchError describes the first query whose scores changed across the restart.
type MismatchError struct {
	Query  int      // index in the workload's queries
	Hashes []uint64 // the query's local block hashes
	Before []index.Score
	After  []index.Score
	Detail string // the first difference, in words
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%v: query %d (%d blocks): %s", ErrScoresDiffer, e.Query, len(e.Hashes), e.Detail)
}

func (e *MismatchError) Unwrap() error { return ErrScoresDiffer }

// CompareScores returns nil when before and after (answers to query number q, with local hashes
// hashes) are identical — same ranks in the same order with the same score and tree size — and a
// *MismatchError naming the first difference otherwise.
func CompareScores(q int, hashes []uint64, before, after []index.Score) error {
	if slices.Equal(before, after) {
		return nil
	}
	e := &MismatchError{Query: q, Hashes: hashes, Before: slices.Clone(before), After: slices.Clone(after)}
	n := min(len(before), len(after))
	for i := range n {
		b, a := before[i], after[i]
		switch {
		case b.Rank() != a.Rank():
			e.Detail = fmt.Sprintf("answer %d is rank %d/%d (score %d) before the restart, rank %d/%d (score %d) after",
				i, b.WorkerID, b.DPRank, b.Score, a.WorkerID, a.DPRank, a.Score)
		case b.Score != a.Score:
			e.Detail = fmt.Sprintf("rank %d/%d scores %d before the restart, %d after", b.WorkerID, b.DPRank, b.Score, a.Score)
		case b.TreeSize != a.TreeSize:
			e.Detail = fmt.Sprintf("rank %d/%d tree_size %d before the restart, %d after", b.WorkerID, b.DPRank, b.TreeSize, a.TreeSize)
		default:
			continue
		}
		return e
	}
	if len(before) > n {
		b := before[n]
		e.Detail = fmt.Sprintf("%d ranks scored before the restart, %d after; first missing: rank %d/%d (score %d)",
			len(before), len(after), b.WorkerID, b.DPRank, b.Score)
	} else {
		a := after[n]
		e.Detail = fmt.Sprintf("%d ranks scored before the restart, %d after; first extra: rank %d/%d (score %d)",
			len(before), len(after), a.WorkerID, a.DPRank, a.Score)
	}
	return e
}
