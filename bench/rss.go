package bench

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// RSS metric names (`kvindex loadgen`): the server's resident set, sampled from its /metrics
// (process_resident_memory_bytes) every LoadOptions.RSSEvery while the events are posted.
const (
	MetricRSSSamples   = "rss_samples"             // samples taken (from the start sample on)
	MetricRSSStartSec  = "rss_start_s"             // when the start sample was taken, since the run began
	MetricRSSStart     = "rss_start_bytes"         // the first sample after the first memtable flush of the run and LoadOptions.RSSWarmup
	MetricRSSEnd       = "rss_end_bytes"           // the last sample, once the events are posted
	MetricRSSMax       = "rss_max_bytes"           // the largest sample from the start sample on
	MetricRSSGrowth    = "rss_growth"              // rss_end ÷ rss_start
	MetricRSSSlope     = "rss_slope_bytes_per_min" // least-squares slope of the samples from the start sample on (only from minSlopeSamples over minSlopeSpan)
	MetricStoreFlushes = "store_flushes"           // memtable flushes during the run (kvindex_store_flushes_total)
	MetricRSSHalves    = "rss_halves_ratio"        // mean of the second half of the samples ÷ mean of the first (from the start sample on)
	defaultRSSEvery    = 5 * time.Second
	rssScrapeTimeout   = 10 * time.Second
	metricRSS          = "process_resident_memory_bytes"
	metricFlushes      = "kvindex_store_flushes_total"
	metricMemory       = "kvindex_memory_bytes"
	metricGoHeapInUse  = "go_memstats_heap_inuse_bytes"
	// A slope is reported only from at least minSlopeSamples samples spanning minSlopeSpan: two
	// samples 0.15 s apart (a short --max-events run) extrapolate one GC cycle to gigabytes a
	// minute.
	minSlopeSamples = 3
	minSlopeSpan    = 30 * time.Second
)

// memParts are the kvindex_memory_bytes parts written to the RSS CSV, in column order.
var memParts = []string{"memtable", "block_cache", "index", "tree_dump_cache", "approx"}

// rssSample is one scrape of the server's memory metrics.
type rssSample struct {
	at      time.Duration // since the run began
	rss     float64
	flushes float64
	heap    float64            // Go heap in use
	parts   map[string]float64 // kvindex_memory_bytes by part
	posted  int64              // events posted and answered so far
}

// rssSampler scrapes the server's /metrics on a timer. Its zero value is not usable: see
// newRSSSampler.
type rssSampler struct {
	hc     *http.Client
	url    string
	start  time.Time
	posted func() int64

	mu      sync.Mutex
	samples []rssSample
	failed  error // the first failed scrape (sampling stops there)
}

func newRSSSampler(hc *http.Client, base string, start time.Time, posted func() int64) *rssSampler {
	return &rssSampler{hc: hc, url: base + "/metrics", start: start, posted: posted}
}

// run samples now and then every `every` until stop is closed, and once more after it closed.
func (s *rssSampler) run(ctx context.Context, every time.Duration, stop <-chan struct{}) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		if !s.sample(ctx) {
			return
		}
		select {
		case <-tk.C:
		case <-stop:
			s.sample(ctx)
			return
		case <-ctx.Done():
			return
		}
	}
}

// sample takes one sample; false once a scrape failed (or the server exports no RSS).
func (s *rssSampler) sample(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, rssScrapeTimeout)
	defer cancel()
	smp, err := s.scrape(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return false
	}
	if err != nil {
		s.failed = err
		return false
	}
	s.samples = append(s.samples, smp)
	return true
}

func (s *rssSampler) scrape(ctx context.Context) (rssSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return rssSample{}, err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return rssSample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return rssSample{}, fmt.Errorf("%w: GET %s: %s", ErrHTTP, s.url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return rssSample{}, fmt.Errorf("GET %s: %w", s.url, err)
	}
	smp := rssSample{at: time.Since(s.start), posted: s.posted(), parts: map[string]float64{}}
	rss, ok := single(fams[metricRSS])
	if !ok {
		return rssSample{}, fmt.Errorf("GET %s: no %s (the server's platform does not report it)", s.url, metricRSS)
	}
	smp.rss = rss
	smp.flushes, _ = single(fams[metricFlushes])
	smp.heap, _ = single(fams[metricGoHeapInUse])
	if f := fams[metricMemory]; f != nil {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "part" {
					smp.parts[lp.GetValue()] = value(m)
				}
			}
		}
	}
	return smp, nil
}

// single is the value of a family's one series (a gauge, counter or untyped sample).
func single(f *dto.MetricFamily) (float64, bool) {
	if f == nil || len(f.GetMetric()) == 0 {
		return 0, false
	}
	return value(f.GetMetric()[0]), true
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

// report adds the RSS metrics: the start sample is the first one taken after the run's first
// memtable flush (the flush count above the first sample's) and at least warmup into the run, or
// the first sample at least warmup in when no flush happened (the last sample if none is).
// Nothing is added without samples. The slope needs minSlopeSamples over minSlopeSpan: with
// fewer it is left out and note says so ("" when the slope was reported).
func (s *rssSampler) report(rep *Report, warmup time.Duration) (note string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return "no RSS samples were taken"
	}
	flushed := s.samples[len(s.samples)-1].flushes > s.samples[0].flushes
	from := len(s.samples) - 1
	for i, smp := range s.samples {
		if smp.at >= warmup && (!flushed || smp.flushes > s.samples[0].flushes) {
			from = i
			break
		}
	}
	xs := s.samples[from:]
	first, last := xs[0], xs[len(xs)-1]
	hi := 0.0
	for _, x := range xs {
		hi = max(hi, x.rss)
	}
	rep.add(MetricRSSSamples, float64(len(xs)), UnitCount)
	rep.add(MetricRSSStartSec, first.at.Seconds(), UnitSec)
	rep.add(MetricRSSStart, first.rss, UnitBytes)
	rep.add(MetricRSSEnd, last.rss, UnitBytes)
	rep.add(MetricRSSMax, hi, UnitBytes)
	rep.add(MetricRSSGrowth, ratio(last.rss, first.rss), UnitRatio)
	if span := last.at - first.at; len(xs) >= minSlopeSamples && span >= minSlopeSpan {
		rep.add(MetricRSSSlope, slopePerMin(xs), UnitBytesPerMin)
	} else {
		note = fmt.Sprintf("no %s: %d RSS samples over %v from the start sample, too few for a slope (it takes %d over %v: a longer run, or --loop)",
			MetricRSSSlope, len(xs), span.Round(time.Millisecond), minSlopeSamples, minSlopeSpan)
	}
	rep.add(MetricRSSHalves, halvesRatio(xs), UnitRatio)
	rep.add(MetricStoreFlushes, last.flushes-s.samples[0].flushes, UnitCount)
	return note
}

// slopePerMin is the least-squares slope of rss over time, in bytes per minute (0 for fewer
// than two samples).
func slopePerMin(xs []rssSample) float64 {
	if len(xs) < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for _, x := range xs {
		t := x.at.Minutes()
		sx, sy, sxx, sxy = sx+t, sy+x.rss, sxx+t*t, sxy+t*x.rss
	}
	n := float64(len(xs))
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / den
}

// halvesRatio is the mean RSS of the second half of xs ÷ that of the first half (1 for fewer
// than two samples): a flatness measure that one GC cycle's peak does not swing.
func halvesRatio(xs []rssSample) float64 {
	if len(xs) < 2 {
		return 1
	}
	mean := func(ys []rssSample) float64 {
		t := 0.0
		for _, y := range ys {
			t += y.rss
		}
		return t / float64(len(ys))
	}
	h := len(xs) / 2
	return ratio(mean(xs[len(xs)-h:]), mean(xs[:h]))
}

// writeCSV writes every sample (from the first, before any flush) to path: seconds since the
// run began, RSS, Go heap in use, the flush count, events posted and kvindex_memory_bytes by part.
func (s *rssSampler) writeCSV(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("loadgen: RSS CSV: %w", err)
	}
	w := csv.NewWriter(f)
	head := []string{"seconds", "rss_bytes", "go_heap_inuse_bytes", "store_flushes", "events_posted"}
	for _, p := range memParts {
		head = append(head, p+"_bytes")
	}
	_ = w.Write(head)
	for _, x := range s.samples {
		row := []string{strconv.FormatFloat(x.at.Seconds(), 'f', 1, 64), ff(x.rss), ff(x.heap), ff(x.flushes), strconv.FormatInt(x.posted, 10)}
		for _, p := range memParts {
			row = append(row, ff(x.parts[p]))
		}
		_ = w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return fmt.Errorf("loadgen: RSS CSV: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("loadgen: RSS CSV: %w", err)
	}
	return nil
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

// err is the scrape error that stopped sampling, if any.
func (s *rssSampler) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}
