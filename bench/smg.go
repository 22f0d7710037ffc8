package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/workload"
)

// ErrSMGMismatch is returned by RunSMG when an answer of the index differs from the workload's
// model, or the index holds another number of entries than the stream leaves.
var ErrSMGMismatch = errors.New("index disagrees with the SMG workload's model")

// SMG metric names (`kvindex bench --workload smg-pinned`, BenchmarkSMG). SMG publishes, for
// its pinned workload (crates/radix_tree/README.md): 26.9 B per holder-block (RSS delta),
// single-holder p50 292 ns, worst cell (gate) p99 7.6 µs, 4.6 M blocks/s writes; fragmented
// gate p99 18.5 µs at 27.5 B; 128 M blocks gate p99 8.0 µs.
const (
	MetricSMGHolderBlocks   = "smg_holder_blocks"               // resident (holder, block) entries
	MetricSMGStreamBlocks   = "smg_stream_blocks"               // blocks named by the stream's events
	MetricSMGWrite          = "smg_write_blocks_per_s"          // stream blocks ÷ fill time, 1 writer
	MetricSMGHeap           = "smg_heap_bytes_per_block"        // live heap after GC ÷ resident entries
	MetricSMGRSSDelta       = "smg_rss_delta_bytes_per_block"   // RSS after fill − before (SMG's method)
	MetricSMGRSSSettled     = "smg_rss_settled_bytes_per_block" // RSS after GC and FreeOSMemory − before
	MetricSMGAnswersChecked = "smg_answers_checked"
)

// SMGOptions configure RunSMG.
type SMGOptions struct {
	Index  index.Options
	Logger *slog.Logger // nil: quiet
}

// RunSMG applies w's stream to a fresh index on one goroutine (timed), then times each query of
// each cell alone and checks every answer against the workload's model. The index is built
// through Apply and queried through FindMatchesInto, as the engine does. It returns the index
// too so that callers may look at it (a heap profile, MemoryBytes).
func RunSMG(ctx context.Context, w *workload.SMGWorkload, o SMGOptions) (*Report, *index.Index, error) {
	lg := o.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	rep := &Report{}
	heapBefore := liveHeap()
	debug.FreeOSMemory() // what the generator and earlier runs left is given back first
	rssBefore, _ := rss()
	ix := index.New(o.Index)
	start := time.Now()
	for i := range w.Ops {
		if i%(1<<16) == 0 && ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		ev := w.Ops[i].Event()
		if res := ix.Apply(&ev); res.Status != index.StatusOK {
			return nil, nil, fmt.Errorf("%w: op %d (holder %d): %v", ErrSMGMismatch, i, w.Ops[i].Holder, res.Status.Err())
		}
	}
	fill := time.Since(start)
	rssAfter, _ := rss()
	heapAfter := liveHeap()
	debug.FreeOSMemory()
	rssSettled, _ := rss()
	resident := float64(w.Resident())
	if got := ix.Blocks(); got != w.Resident() {
		return nil, nil, fmt.Errorf("%w: the index holds %d entries, the stream leaves %d", ErrSMGMismatch, got, w.Resident())
	}
	rep.add(MetricSMGHolderBlocks, resident, UnitCount)
	rep.add(MetricSMGStreamBlocks, float64(w.StreamBlocks), UnitCount)
	rep.add(MetricSMGWrite, float64(w.StreamBlocks)/fill.Seconds(), UnitRate)
	rep.add(MetricSMGHeap, (float64(heapAfter)-float64(heapBefore))/resident, UnitBytes)
	rep.add(MetricSMGRSSDelta, (float64(rssAfter)-float64(rssBefore))/resident, UnitBytes)
	rep.add(MetricSMGRSSSettled, (float64(rssSettled)-float64(rssBefore))/resident, UnitBytes)
	lg.Info("bench: SMG stream applied", "profile", w.Profile.Name, "ops", len(w.Ops), "took", fill)

	var dst []index.Score
	lat := make([]time.Duration, 0, 2000)
	checked := 0
	for _, c := range w.Cells {
		lat = lat[:0]
		for _, q := range c.Queries {
			t := time.Now()
			dst = ix.FindMatchesInto(dst[:0], q.Contents, false)
			lat = append(lat, time.Since(t))
		}
		for qi, q := range c.Queries {
			dst = ix.FindMatchesInto(dst[:0], q.Contents, false)
			if err := checkSMGAnswer(w, q, dst); err != nil {
				return nil, nil, fmt.Errorf("%w: cell %s query %d: %v", ErrSMGMismatch, c.Name, qi, err)
			}
			checked++
		}
		slices.Sort(lat)
		name := "smg_" + strings.NewReplacer("=", "", " ", "_").Replace(strings.ToLower(c.Name))
		rep.add(name+"_p50_ns", float64(smgPercentile(lat, 0.50).Nanoseconds()), UnitNS)
		rep.add(name+"_p99_ns", float64(smgPercentile(lat, 0.99).Nanoseconds()), UnitNS)
	}
	rep.add(MetricSMGAnswersChecked, float64(checked), UnitCount)
	runtime.KeepAlive(w)
	return rep, ix, nil
}

// checkSMGAnswer compares one answer with the model: the same holders, the same scores.
func checkSMGAnswer(w *workload.SMGWorkload, q workload.SMGQuery, got []index.Score) error {
	want := map[uint64]uint32{}
	w.Want(q, func(h uint32, s int) { want[workload.SMGRank(h).WorkerID] = uint32(s) })
	if len(got) != len(want) {
		return fmt.Errorf("%d ranks scored, the model scores %d", len(got), len(want))
	}
	for _, s := range got {
		if ws, ok := want[s.WorkerID]; !ok || ws != s.Score {
			return fmt.Errorf("worker %d scores %d, the model %d", s.WorkerID, s.Score, ws)
		}
	}
	return nil
}

// smgPercentile is the p-quantile of sorted durations, SMG's way: the element at round((n−1)·p).
func smgPercentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(float64(len(sorted)-1)*p+0.5)]
}
