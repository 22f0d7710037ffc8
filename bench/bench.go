package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvindex/kvindex/approx"
	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	kvpart "github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
	"github.com/kvindex/kvindex/workload"
	"github.com/schollz/progressbar/v3"
)

// Sentinels.
var (
	// ErrOptions is returned by Run and LoadGen for invalid options (a usage error).
	ErrOptions = errors.New("bad bench options")
	// ErrIngest is returned when the pipeline did not accept every event of the stream (some were
	// ignored as stale or duplicate): the stream or the pipeline is wrong, the numbers would lie.
	ErrIngest = errors.New("ingest did not accept the whole stream")
	// ErrDataDirInUse is returned when Options.DataDir already holds benchmark data.
	ErrDataDirInUse = errors.New("data dir not empty")
)

// Options configure Run. Zero values take the documented defaults (docs/BENCHMARKS.md's flag defaults).
type Options struct {
	// The workload: exactly one of Requests (an already loaded trace), TracePath (a Mooncake
	// JSONL trace) or WorkloadDir (events.ndjson + queries.ndjson) is set.
	Requests    []workload.Request
	TracePath   string
	WorkloadDir string
	// Scale is the number of disjoint trace copies; default 1. Ignored with WorkloadDir.
	Scale int
	// Workload shapes the generator (workers 256, cache blocks 512, speedup 16, seed 42).
	Workload workload.WorkloadOptions
	// Producers is the number of concurrent submitters; default 16.
	Producers int
	// Batch is the number of events per Submit (and per commit in the Pebble ceiling); default 1.
	Batch int
	// Durability is the sync mode of the pipeline and of the Pebble ceiling; default wal.Sync.
	Durability wal.Durability
	// Lanes is the pipeline's lane count; default GOMAXPROCS (as `kvindex serve`).
	Lanes int
	// CheckpointRatio is the server's online checkpoint ratio; default
	// engine.DefaultCheckpointRatio (as `kvindex serve`), negative is off.
	CheckpointRatio float64
	// DataDir holds the two stores (DataDir/kvindex, DataDir/pebble-ceiling) and is kept after
	// the run; default a temporary dir, removed after.
	DataDir string
	// LoadedMax bounds the loaded query phase of stage 3; default 30 s.
	LoadedMax time.Duration
	// Queries caps the non-empty queries of stages 3 and 4 (the idle passes, the loaded
	// querier, the after-restart comparison): an evenly spaced sample of the stream's non-empty
	// queries, the j-th of N taken at ⌊j·T/N⌋ of T; all of them when T ≤ N. Default
	// DefaultQueries, negative is every query. Approximate and accuracy modes use every query.
	Queries int
	// Logger receives stage logs; default slog.Default(). Pebble and the server log through it.
	Logger *slog.Logger
	// Progress, when set, shows progress bars there (the CLI passes stderr on a terminal).
	Progress io.Writer
	// NoCeiling skips baseline (b), the raw Pebble ceiling, and the ratios to it (at fleet
	// scale it writes the whole log once more: 20 GB and minutes at --scale 640).
	NoCeiling bool
	// Approximate replaces stages 2–5 by approximate mode (docs/CONTRACT.md §8, issue 14): each query's
	// routing decision is recorded instead of the events (see approxStages). The workload must
	// name each query's worker (ErrNoDecisions otherwise).
	Approximate bool
	// ApproxTTL is the side index's TTL with Approximate; default approx.DefaultTTL (120 s), long
	// enough that nothing expires during a run.
	ApproxTTL time.Duration
	// Accuracy replaces stages 2–5 by the accuracy stage (accuracy.go): each routed request posts
	// its outcome; the index's hit-prediction accuracy with every event, then with a lost stream.
	Accuracy bool
}

func (o Options) withDefaults() (Options, error) {
	n := 0
	for _, set := range []bool{o.Requests != nil, o.TracePath != "", o.WorkloadDir != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return o, fmt.Errorf("%w: give exactly one of a trace or a workload dir", ErrOptions)
	}
	if o.Scale < 0 || o.Producers < 0 || o.Batch < 0 || o.Lanes < 0 || o.LoadedMax < 0 || o.ApproxTTL < 0 {
		return o, fmt.Errorf("%w: negative scale, producers, batch, lanes, loaded max or approx TTL", ErrOptions)
	}
	if o.ApproxTTL == 0 {
		o.ApproxTTL = approx.DefaultTTL
	}
	if o.Scale == 0 {
		o.Scale = 1
	}
	if o.Producers == 0 {
		o.Producers = 16
	}
	if o.Batch == 0 {
		o.Batch = 1
	}
	if o.Queries == 0 {
		o.Queries = DefaultQueries
	}
	if o.LoadedMax == 0 {
		o.LoadedMax = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// DefaultQueries is Options.Queries' default: more than the 96,248 non-empty queries of
// --scale 8, so runs up to there time and compare every query.
const DefaultQueries = 100_000

// run is the state of one Run.
type run struct {
	o      Options
	lg     *slog.Logger
	st     *workload.Stream
	rep    *Report
	dir    string // the kvindex data dir
	ceil   string // the Pebble ceiling dir
	ingest float64
	// The query sample of stages 3 and 4 (Options.Queries): the queries and their indexes in
	// the stream.
	sample   []workload.Query
	sampleAt []int
}

// LoadWorkload returns the workload o describes (docs/BENCHMARKS.md stage 1).
func LoadWorkload(o Options) (*workload.Workload, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.WorkloadDir != "" {
		return workload.ReadWorkloadDir(o.WorkloadDir)
	}
	reqs := o.Requests
	if reqs == nil {
		if reqs, err = workload.LoadTraceFile(o.TracePath); err != nil {
			return nil, err
		}
	}
	return workload.Generate(reqs, o.Scale, o.Workload)
}

// LoadStream returns the workload o describes as a stream (docs/BENCHMARKS.md stage 1), generated
// chunk by chunk by each stage that reads it; a workload dir is read whole.
func LoadStream(o Options) (*workload.Stream, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.WorkloadDir != "" {
		wl, err := workload.ReadWorkloadDir(o.WorkloadDir)
		if err != nil {
			return nil, err
		}
		return workload.StreamOf(wl), nil
	}
	reqs := o.Requests
	if reqs == nil {
		if reqs, err = workload.LoadTraceFile(o.TracePath); err != nil {
			return nil, err
		}
	}
	return workload.NewStream(reqs, o.Scale, o.Workload)
}

// LoadGenerator returns the simulation of the options' trace as a workload.Generator, to be run
// lap after lap (`kvindex loadgen --loop`); a workload dir cannot loop (ErrOptions).
func LoadGenerator(o Options) (*workload.Generator, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.WorkloadDir != "" {
		return nil, fmt.Errorf("%w: a workload dir cannot loop; give a trace", ErrOptions)
	}
	reqs := o.Requests
	if reqs == nil {
		if reqs, err = workload.LoadTraceFile(o.TracePath); err != nil {
			return nil, err
		}
	}
	return workload.NewGenerator(reqs, o.Scale, o.Workload)
}

// Run performs the benchmark of docs/BENCHMARKS.md and returns the metrics measured. On a failure after
// some stages ran, the report holds what was measured and the error says what failed (a
// *MismatchError for scores that changed across the restart).
func Run(ctx context.Context, o Options) (*Report, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &run{o: o, lg: o.Logger, rep: &Report{}}
	start := time.Now()
	defer func() {
		r.rep.add(MetricRunSeconds, time.Since(start).Seconds(), UnitSec)
		if _, peak := rss(); peak > 0 {
			r.rep.add(MetricPeakRSS, float64(peak), UnitBytes)
		}
	}()
	r.lg.Info("bench: stage 1: workload")
	if r.st, err = LoadStream(o); err != nil {
		return nil, fmt.Errorf("bench: workload: %w", err)
	}
	r.rep.add(MetricWorkloadSeconds, time.Since(start).Seconds(), UnitSec)
	r.rep.add(MetricEvents, float64(r.st.Events()), UnitCount)
	r.rep.add(MetricBlocks, float64(r.st.Blocks()), UnitCount)
	r.rep.add(MetricRoutingHitRatio, r.st.RoutingHitRatio(), UnitRatio)
	r.lg.Info("bench: workload ready (generated again, chunk by chunk, by each stage)", "events", r.st.Events(), "blocks", r.st.Blocks(),
		"queries", r.st.Queries(), "scale", r.st.Copies(), "took_ms", time.Since(start).Milliseconds())

	base := o.DataDir
	if base == "" {
		if base, err = os.MkdirTemp("", "kvindex-bench-"); err != nil {
			return nil, fmt.Errorf("bench: temp dir: %w", err)
		}
		defer os.RemoveAll(base)
	}
	r.dir, r.ceil = filepath.Join(base, "kvindex"), filepath.Join(base, "pebble-ceiling")
	for _, d := range []string{r.dir, r.ceil} {
		if ents, err := os.ReadDir(d); err == nil && len(ents) > 0 {
			return nil, fmt.Errorf("bench: %w: %s (give an empty --data-dir)", ErrDataDirInUse, d)
		}
	}
	if o.Accuracy {
		if err := r.accuracyStages(ctx); err != nil {
			return r.rep, err
		}
		return r.rep, nil
	}
	if o.Approximate {
		if err := r.approxStages(ctx); err != nil {
			return r.rep, err
		}
		r.lg.Info("bench: done", "took_ms", time.Since(start).Milliseconds())
		return r.rep, nil
	}
	c0 := readCPU(true)
	if err := r.pipelineStages(ctx); err != nil {
		return r.rep, err
	}
	if err := r.memoryBaseline(ctx); err != nil {
		return r.rep, err
	}
	if !o.NoCeiling {
		if err := r.pebbleCeiling(ctx); err != nil {
			return r.rep, err
		}
	}
	c1 := readCPU(false)
	if v, ok := gcShare(c0, c1); ok {
		r.rep.add(MetricGCCPUShare, v, UnitRatio)
	}
	if v, ok := busyShare(c0, c1); ok {
		r.rep.add(MetricGCBusyShare, v, UnitRatio)
	}
	if m, ok := r.rep.Get(MetricMemoryIngestEventsPS); ok && m > 0 {
		r.rep.add(MetricIngestVsMemory, r.ingest/m, UnitRatio)
	}
	if c, ok := r.rep.Get(MetricPebbleCeilingEventsPS); ok && c > 0 {
		r.rep.add(MetricIngestVsCeiling, r.ingest/c, UnitRatio)
		if m, ok := r.rep.Get(MetricMemoryIngestEventsPS); ok && m > 0 {
			r.rep.add(MetricIngestVsLimit, r.ingest/min(c, m), UnitRatio)
		}
	}
	r.lg.Info("bench: done", "took_ms", time.Since(start).Milliseconds())
	return r.rep, nil
}

// engineConfig is the engine's configuration as `kvindex serve` would set it.
func (r *run) engineConfig() engine.Config {
	cfg := engine.Config{
		DataDir:      r.dir,
		Durability:   r.o.Durability,
		Lanes:        r.o.Lanes,
		RetainEvents: engine.DefaultRetainEvents,
		Logger:       r.lg,
		TuneGC:       true, // as serve: the restart stage measures serve's replay
	}
	switch {
	case r.o.CheckpointRatio == 0:
		cfg.CheckpointRatio = engine.DefaultCheckpointRatio
	case r.o.CheckpointRatio > 0:
		cfg.CheckpointRatio = r.o.CheckpointRatio
	}
	return cfg
}

// stage brackets one stage for its GC share: call it at the start (it collects first), and the
// returned function at the end (it logs the stage's wall time, GC share and memory).
func (r *run) stage(metric string) func() {
	c0 := readCPU(true)
	return func() {
		c1 := readCPU(false)
		v, ok := gcShare(c0, c1)
		if ok {
			r.rep.add(metric, v, UnitRatio)
		}
		now, peak := rss()
		r.lg.Info("bench: stage done", "metric", metric, "took_ms", c1.at.Sub(c0.at).Milliseconds(), "gc_share", v, "rss_bytes", now, "peak_rss_bytes", peak)
	}
}

// pipelineStages runs stages 2–4 on one data dir.
func (r *run) pipelineStages(ctx context.Context) error {
	s, err := engine.Open(r.engineConfig())
	if err != nil {
		return fmt.Errorf("bench: open: %w", err)
	}
	defer func() {
		if s != nil {
			_ = s.Close()
		}
	}()
	if err := s.Recover(ctx, nil); err != nil {
		return fmt.Errorf("bench: recover: %w", err)
	}

	// Stage 2: ingest.
	r.lg.Info("bench: stage 2: ingest through the pipeline", "producers", r.o.Producers, "batch", r.o.Batch, "durability", r.o.Durability.String())
	var accepted, ignored atomic.Int64
	submit := func(ctx context.Context, evs []event.RouterEvent) error {
		res, err := s.Ingest(ctx, kvpart.Default, evs) // the ingest door: place, log, apply
		accepted.Add(int64(res.Accepted))
		ignored.Add(int64(res.Ignored))
		return err
	}
	walIn := s.Store().DB().Metrics().WAL.BytesIn
	events, blocks := r.st.Events(), r.st.Blocks()
	end := r.stage(MetricGCCPUShareIngest)
	took, err := r.drive(ctx, streamEvents(r.st), driveOpts{what: "ingest", submit: submit, total: events, batch: r.o.Batch})
	if err != nil {
		return fmt.Errorf("bench: ingest: %w", err)
	}
	end()
	if int(accepted.Load()) != events {
		return fmt.Errorf("bench: %w: %d of %d events accepted, %d ignored", ErrIngest, accepted.Load(), events, ignored.Load())
	}
	r.ingest = float64(events) / took.Seconds()
	r.rep.add(MetricIngestEventsPerS, r.ingest, UnitRate)
	r.rep.add(MetricIngestBlocksPerS, float64(blocks)/took.Seconds(), UnitRate)
	r.rep.add(MetricIndexEntries, float64(s.Partitions().IndexOf(0).Blocks()), UnitCount)
	r.lg.Info("bench: ingest done", "events_per_s", int(r.ingest), "took_ms", took.Milliseconds())

	// The log's size on disk: flush the memtable so the records are in sstables, then ask Pebble
	// for the bytes of the 'L' key range.
	db := s.Store().DB()
	if err := db.Flush(); err != nil {
		return fmt.Errorf("bench: flush: %w", err)
	}
	lo, hi := store.PrefixBounds(store.PrefixLog)
	walBytes, err := db.EstimateDiskUsage(lo, hi)
	if err != nil {
		return fmt.Errorf("bench: disk usage: %w", err)
	}
	if events > 0 {
		r.rep.add(MetricWALBytesPerEvent, float64(walBytes)/float64(events), UnitBytes)
		r.rep.add(MetricWALBytesInPerEvent, float64(db.Metrics().WAL.BytesIn-walIn)/float64(events), UnitBytes)
		lo, hi := store.PrefixBounds(store.PrefixSnapshot)
		if snapBytes, err := db.EstimateDiskUsage(lo, hi); err == nil {
			r.rep.add(MetricSnapshotBytesPerEvent, float64(snapBytes)/float64(events), UnitBytes)
		}
	}

	// Stage 3: queries, idle then under half-rate ingest.
	r.drawSample()
	if err := r.idleQueries(ctx, s); err != nil {
		return err
	}
	if err := r.tieredQueries(ctx, s); err != nil {
		return err
	}
	r.rep.add(MetricHeapAtEnd, float64(liveHeap()), UnitBytes)
	end = r.stage(MetricGCCPUShareLoaded)
	if err := r.loadedQueries(ctx, s, submit); err != nil {
		return err
	}
	end()

	// Stage 4: restart and compare the sample.
	r.lg.Info("bench: stage 4: restart")
	// Stage 3's idle pass on the index as the restart finds it (with the loaded stage's copy),
	// to set beside the same pass on the rebuilt index below: same entries, same answers.
	lat, err := r.timeQueries(ctx, s, true, nil)
	if err != nil {
		return err
	}
	r.rep.add(MetricFindMatchesPreRestartP50, float64(Percentile(lat, 0.50)), UnitNS)
	r.rep.add(MetricFindMatchesPreRestartP99, float64(Percentile(lat, 0.99)), UnitNS)
	r.rep.add(MetricFindMatchesPreRestartP999, float64(Percentile(lat, 0.999)), UnitNS)
	before := r.answers(ctx, s.Partitions().IndexOf(0))
	if err := s.Close(); err != nil {
		s = nil
		return fmt.Errorf("bench: close before restart: %w", err)
	}
	s = nil
	end = r.stage(MetricGCCPUShareRestart) // collects the closed engine first, as a new process starts empty
	t0 := time.Now()
	s2, err := engine.Open(r.engineConfig())
	if err != nil {
		return fmt.Errorf("bench: reopen: %w", err)
	}
	s = s2
	if err := s.Recover(ctx, nil); err != nil {
		return fmt.Errorf("bench: restart replay: %w", err)
	}
	restart := time.Since(t0)
	end()
	r.rep.add(MetricRestartSeconds, restart.Seconds(), UnitSec)
	r.rep.add(MetricRestartBlocksPerS, float64(s.Partitions().IndexOf(0).Blocks())/restart.Seconds(), UnitRate)
	r.lg.Info("bench: restarted", "blocks", s.Partitions().IndexOf(0).Blocks(), "took_ms", restart.Milliseconds())
	if err := before.compare(ctx, s.Partitions().IndexOf(0)); err != nil {
		return err
	}
	r.lg.Info("bench: every sampled query scores the same after the restart", "queries", len(r.sample))
	// The same idle pass on the rebuilt index: the replay links each rank's final blocks
	// together, so its nodes lie rank by rank instead of in the stream's interleaved order
	// (index BenchmarkTraceHeapSize measures what the layout alone costs a query).
	lat, err = r.timeQueries(ctx, s, true, nil)
	if err != nil {
		return err
	}
	r.rep.add(MetricFindMatchesRestartedP50, float64(Percentile(lat, 0.50)), UnitNS)
	r.rep.add(MetricFindMatchesRestartedP99, float64(Percentile(lat, 0.99)), UnitNS)
	r.rep.add(MetricFindMatchesRestartedP999, float64(Percentile(lat, 0.999)), UnitNS)
	return nil
}

// drawSample picks stages 3 and 4's queries (Options.Queries).
func (r *run) drawSample() {
	t := r.st.NonEmptyQueries()
	n := t
	if r.o.Queries > 0 {
		n = min(n, r.o.Queries)
	}
	r.sample, r.sampleAt = make([]workload.Query, n), make([]int, n)
	for j := range n {
		q := r.st.NonEmpty(int(int64(j) * int64(t) / int64(n)))
		r.sampleAt[j], r.sample[j] = q, r.st.Query(q)
	}
	r.rep.add(MetricQueries, float64(n), UnitCount)
	r.rep.add(MetricSampledQueries, float64(t), UnitCount)
}

// timeQueries asks every sampled query once, each call timed alone, and returns the sorted
// latencies.
func (r *run) timeQueries(ctx context.Context, s *engine.Engine, deviceOnly bool, extended *int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, len(r.sample))
	var ans engine.Answer
	part, _ := s.Partitions().Lookup(kvpart.Default)
	for i := range r.sample {
		if i%4096 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		t := time.Now()
		s.FindInto(&ans, part, engine.Query{Hashes: r.sample[i].BlockHashes, DeviceOnly: deviceOnly}) // the one query
		lat = append(lat, time.Since(t))
		if extended != nil && ans.Ext != nil {
			*extended++
		}
	}
	slices.Sort(lat)
	return lat, nil
}

// idleQueries is stage 3's idle pass, then the same pass with the collector off and with
// collections running back to back beside it.
func (r *run) idleQueries(ctx context.Context, s *engine.Engine) error {
	r.lg.Info("bench: stage 3: find_matches", "queries", len(r.sample), "of", r.st.NonEmptyQueries())
	gc0 := gcCycles()
	lat, err := r.timeQueries(ctx, s, true, nil)
	if err != nil {
		return err
	}
	r.rep.add(MetricFindMatchesGCCycles, float64(gcCycles()-gc0), UnitCount)
	r.rep.add(MetricFindMatchesP50, float64(Percentile(lat, 0.50)), UnitNS)
	r.rep.add(MetricFindMatchesP99, float64(Percentile(lat, 0.99)), UnitNS)
	r.rep.add(MetricFindMatchesP999, float64(Percentile(lat, 0.999)), UnitNS)

	runtime.GC()
	old := debug.SetGCPercent(-1)
	lat, err = r.timeQueries(ctx, s, true, nil)
	debug.SetGCPercent(old)
	if err != nil {
		return err
	}
	r.rep.add(MetricFindMatchesGCOffP99, float64(Percentile(lat, 0.99)), UnitNS)
	r.rep.add(MetricFindMatchesGCOffP999, float64(Percentile(lat, 0.999)), UnitNS)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var cycles atomic.Int64
	wg.Add(1)
	go func() { // the collector loop: owned here, stopped by stop
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			runtime.GC()
			cycles.Add(1)
		}
	}()
	time.Sleep(time.Millisecond) // the first collection is under way
	lat, err = r.timeQueries(ctx, s, true, nil)
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	r.rep.add(MetricFindMatchesGCRunningP99, float64(Percentile(lat, 0.99)), UnitNS)
	r.rep.add(MetricFindMatchesGCRunningP999, float64(Percentile(lat, 0.999)), UnitNS)
	r.rep.add(MetricFindMatchesGCRunningGCs, float64(cycles.Load()), UnitCount)
	return nil
}

// sampleAnswers are the sample's answers on one index, as a digest and a length each (24 bytes a
// score held for every sampled query would be 0.6 GB at --scale 8: ~256 ranks score block 0 of
// each copy).
type sampleAnswers struct {
	r    *run
	seed maphash.Seed
	sums []uint64
	lens []int
}

// answers records every sampled query's answer on ix.
func (r *run) answers(ctx context.Context, ix *index.Index) sampleAnswers {
	a := sampleAnswers{r: r, seed: maphash.MakeSeed()}
	var dst []index.Score
	var buf []byte
	for i := range r.sample {
		if i%4096 == 0 && ctx.Err() != nil {
			break // compare reports the cancellation
		}
		dst = ix.FindMatchesInto(dst, r.sample[i].BlockHashes, false)
		var sum uint64
		sum, buf = digest(a.seed, buf, dst)
		a.sums = append(a.sums, sum)
		a.lens = append(a.lens, len(dst))
	}
	return a
}

// digest hashes an answer: every field of every score, in order.
func digest(seed maphash.Seed, buf []byte, scores []index.Score) (uint64, []byte) {
	buf = buf[:0]
	for _, sc := range scores {
		buf = binary.LittleEndian.AppendUint64(buf, sc.WorkerID)
		buf = binary.LittleEndian.AppendUint32(buf, sc.DPRank)
		buf = binary.LittleEndian.AppendUint32(buf, sc.Score)
		buf = binary.LittleEndian.AppendUint64(buf, sc.TreeSize)
	}
	return maphash.Bytes(seed, buf), buf
}

// compare asks every sampled query of after and returns the first answer that differs from the
// recorded one: a *MismatchError naming the query's index in the stream, its answer after the
// restart and how it differs (the ranks scored before are not kept, only their digest).
func (a sampleAnswers) compare(ctx context.Context, after *index.Index) error {
	var dst []index.Score
	var buf []byte
	r := a.r
	for i := range r.sample {
		if (i%4096 == 0 || i >= len(a.sums)) && ctx.Err() != nil {
			return ctx.Err()
		}
		h := r.sample[i].BlockHashes
		dst = after.FindMatchesInto(dst, h, false)
		var sum uint64
		sum, buf = digest(a.seed, buf, dst)
		if sum == a.sums[i] && len(dst) == a.lens[i] {
			continue
		}
		e := &MismatchError{Query: r.sampleAt[i], Hashes: h, After: slices.Clone(dst)}
		if len(dst) != a.lens[i] {
			e.Detail = fmt.Sprintf("%d ranks scored before the restart, %d after", a.lens[i], len(dst))
		} else {
			e.Detail = fmt.Sprintf("%d ranks scored before the restart and after, with other ranks, scores or tree sizes after", len(dst))
		}
		return e
	}
	return nil
}

// compareAll asks every query of qs of both indexes and returns the first mismatch.
func compareAll(ctx context.Context, queries []workload.Query, qs []int, before, after *index.Index) error {
	var a, b []index.Score
	for i, qi := range qs {
		if i%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		h := queries[qi].BlockHashes
		b = before.FindMatchesInto(b, h, false)
		a = after.FindMatchesInto(a, h, false)
		if err := CompareScores(qi, h, b, a); err != nil {
			return err
		}
	}
	return nil
}

// loadedQueries times queries in a closed loop while a shifted copy of the stream is ingested at
// half of stage 2's rate, until that copy is in or LoadedMax has passed.
func (r *run) loadedQueries(ctx context.Context, s *engine.Engine, submit submitFunc) error {
	qs := r.sample
	if len(qs) == 0 || r.st.Events() == 0 {
		return nil
	}
	rate := r.ingest / 2
	r.lg.Info("bench: stage 3: find_matches under load", "ingest_events_per_s", int(rate), "max_ms", r.o.LoadedMax.Milliseconds())
	lctx, cancel := context.WithTimeout(ctx, r.o.LoadedMax)
	defer cancel()
	done := make(chan struct{})
	var gen sync.RWMutex // held by the generator between the ingest phases: no query is timed beside it
	var lat []time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the querier: owned here, stopped by done
		defer wg.Done()
		var ans engine.Answer
		part, _ := s.Partitions().Lookup(kvpart.Default)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			gen.RLock()
			t := time.Now()
			s.FindInto(&ans, part, engine.Query{Hashes: qs[i%len(qs)].BlockHashes, DeviceOnly: true})
			lat = append(lat, time.Since(t))
			gen.RUnlock()
		}
	}()
	var sent atomic.Int64
	gc0 := gcCycles()
	src := shifted(streamEvents(r.st), r.st.MaxWorkerID()+1)
	took, err := r.drive(lctx, src, driveOpts{what: "loaded ingest", submit: submit, total: r.st.Events(),
		batch: r.o.Batch, rate: rate, sent: &sent, gen: &gen})
	close(done)
	wg.Wait()
	r.rep.add(MetricFindMatchesLoadedGCCycles, float64(gcCycles()-gc0), UnitCount)
	if err != nil && !(errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil) {
		return fmt.Errorf("bench: loaded ingest: %w", err)
	}
	slices.Sort(lat)
	r.rep.add(MetricFindMatchesLoadedP99, float64(Percentile(lat, 0.99)), UnitNS)
	r.rep.add(MetricLoadedQueries, float64(len(lat)), UnitCount)
	r.rep.add(MetricLoadedIngestEventsPS, float64(sent.Load())/took.Seconds(), UnitRate)
	// Let the lanes finish what the deadline cut off, so the restart sees a quiet pipeline.
	return s.Flush(ctx)
}

// tieredQueries times the same queries with the tier walk (docs/CONTRACT.md §7) on the default partition,
// the one the benchmark writes to.
func (r *run) tieredQueries(ctx context.Context, s *engine.Engine) error {
	ts := s.Partitions().TiersOf(0)
	entries := uint64(0)
	for _, tr := range tier.Lower {
		entries += ts.Lower(tr).Blocks()
	}
	r.rep.add(MetricTierEntries, float64(entries), UnitCount)
	extended := 0
	lat, err := r.timeQueries(ctx, s, false, &extended)
	if err != nil {
		return err
	}
	r.rep.add(MetricFindMatchesTieredP50, float64(Percentile(lat, 0.50)), UnitNS)
	r.rep.add(MetricFindMatchesTieredP99, float64(Percentile(lat, 0.99)), UnitNS)
	if len(r.sample) > 0 {
		r.rep.add(MetricTierExtendedQueries, float64(extended)/float64(len(r.sample)), UnitRatio)
	}
	return nil
}

// memoryBaseline is baseline (a): the same producer split applied to a fresh index, no log. The
// heap the index holds is measured here, where nothing else is allocating.
func (r *run) memoryBaseline(ctx context.Context) error {
	r.lg.Info("bench: stage 5a: in-memory apply baseline")
	end := r.stage(MetricGCCPUShareMemoryIngest)
	heap0 := liveHeap()
	ix := tier.New(nil) // every tier: the stream may offload to host memory (--host-blocks)
	apply := func(_ context.Context, evs []event.RouterEvent) error {
		for i := range evs {
			ix.Apply(&evs[i])
		}
		return nil
	}
	// Batches of 256 here: Apply takes one event at a time either way; this only keeps the
	// progress and cancellation checks off the per-event path.
	took, err := r.drive(ctx, streamEvents(r.st), driveOpts{what: "memory apply", submit: apply, total: r.st.Events(), batch: 256})
	if err != nil {
		return fmt.Errorf("bench: memory baseline: %w", err)
	}
	r.rep.add(MetricMemoryIngestBlocksPerS, float64(r.st.Blocks())/took.Seconds(), UnitRate)
	r.rep.add(MetricMemoryIngestEventsPS, float64(r.st.Events())/took.Seconds(), UnitRate)
	n := ix.Device.Blocks()
	for _, tr := range tier.Lower {
		n += ix.Lower(tr).Blocks() // (rank, edge) entries of the lower tiers count as blocks
	}
	if n > 0 {
		r.rep.add(MetricHeapBytesPerBlock, (float64(liveHeap())-float64(heap0))/float64(n), UnitBytes)
	}
	runtime.KeepAlive(ix)
	ix = nil
	end()
	return nil
}

// gcCycles returns the number of completed GC cycles (runtime/metrics: no stop-the-world, unlike
// runtime.ReadMemStats).
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// liveHeap returns HeapAlloc after two collections (the first runs finalizers and empties
// sync.Pools' primary caches; the second frees what they held).
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// pebbleCeiling is baseline (b): the same log records (format 4: one per rank's run of
// consecutive events in a commit, as wal.Batch groups them), the same batching, producers and
// sync mode, committed straight to a fresh store: no cursors, decisions or tree.
func (r *run) pebbleCeiling(ctx context.Context) error {
	r.lg.Info("bench: stage 5b: raw Pebble ceiling")
	end := r.stage(MetricGCCPUShareCeiling)
	st, err := store.Open(r.ceil, store.Options{Logger: r.lg})
	if err != nil {
		return fmt.Errorf("bench: pebble ceiling: %w", err)
	}
	defer st.Close()
	lg, err := wal.Open(st, wal.Options{Durability: r.o.Durability, Logger: r.lg})
	if err != nil {
		return fmt.Errorf("bench: pebble ceiling: %w", err)
	}
	var batches sync.Pool
	commit := func(ctx context.Context, evs []event.RouterEvent) error {
		b, _ := batches.Get().(*wal.Batch)
		if b == nil {
			b = lg.NewBatch()
		}
		for i := range evs {
			b.Append(&evs[i])
		}
		err := lg.Commit(ctx, b)
		batches.Put(b)
		return err
	}
	took, err := r.drive(ctx, streamEvents(r.st), driveOpts{what: "pebble ceiling", submit: commit, total: r.st.Events(), batch: r.o.Batch})
	if err != nil {
		return fmt.Errorf("bench: pebble ceiling: %w", err)
	}
	r.rep.add(MetricPebbleCeilingEventsPS, float64(r.st.Events())/took.Seconds(), UnitRate)
	end()
	return nil
}

func (r *run) bar(what string, total int) *progressbar.ProgressBar {
	if r.o.Progress == nil {
		return nil
	}
	return progressbar.NewOptions64(int64(total),
		progressbar.OptionSetWriter(r.o.Progress),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

// nonEmpty returns the indexes of the queries that name at least one block.
func nonEmpty(qs []workload.Query) []int {
	out := make([]int, 0, len(qs))
	for i := range qs {
		if len(qs[i].BlockHashes) > 0 {
			out = append(out, i)
		}
	}
	return out
}
