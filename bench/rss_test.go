package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestRSSReport checks the rules of the RSS metrics: the start sample is the first after the
// run's first memtable flush and at least the warm-up into the run (the first past the warm-up
// when nothing flushed); max, growth, the halves ratio and the slope are taken from it on; and
// store_flushes counts the flushes of the run.
func TestRSSReport(t *testing.T) {
	mk := func(flushes []float64, rss []float64) *rssSampler {
		s := &rssSampler{}
		for i := range rss {
			s.samples = append(s.samples, rssSample{at: time.Duration(i) * time.Minute, rss: rss[i], flushes: flushes[i]})
		}
		return s
	}
	for _, c := range []struct {
		name                      string
		flushes, rss              []float64
		warmup                    time.Duration
		start, end, max, atMinute float64
		halves, slope, flushCount float64
	}{
		{"first flush", []float64{1, 1, 2, 3, 4, 5}, []float64{10, 50, 100, 100, 100, 100}, 0, 100, 100, 100, 2, 1, 0, 4},
		{"flush then warm-up", []float64{1, 2, 2, 3, 4, 5}, []float64{10, 50, 100, 110, 120, 130}, 2 * time.Minute, 100, 130, 130, 2, 125.0 / 105.0, 10, 4},
		{"no flush", []float64{1, 1, 1, 1}, []float64{10, 20, 30, 40}, time.Minute, 20, 40, 40, 1, 2, 10, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := &Report{}
			mk(c.flushes, c.rss).report(rep, c.warmup)
			for name, want := range map[string]float64{
				MetricRSSStart: c.start, MetricRSSEnd: c.end, MetricRSSMax: c.max, MetricRSSStartSec: c.atMinute * 60,
				MetricRSSGrowth: c.end / c.start, MetricRSSSlope: c.slope, MetricStoreFlushes: c.flushCount,
			} {
				if got, ok := rep.Get(name); !ok || math.Abs(got-want) > 1e-9 {
					t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
				}
			}
			if got, _ := rep.Get(MetricRSSHalves); math.Abs(got-c.halves) > 1e-9 {
				t.Errorf("%s = %v, want %v", MetricRSSHalves, got, c.halves)
			}
		})
	}
	rep := &Report{}
	(&rssSampler{}).report(rep, 0)
	if _, ok := rep.Get(MetricRSSStart); ok {
		t.Error("RSS metrics reported without samples")
	}
}

// TestRSSSlopeNeedsSamples: a short run (issue 36: two samples 0.15 s apart) reports no slope
// and says why; a long enough one reports it in bytes per minute.
func TestRSSSlopeNeedsSamples(t *testing.T) {
	for _, c := range []struct {
		name  string
		at    []time.Duration
		slope bool
	}{
		{"two samples 0.15 s apart", []time.Duration{0, 150 * time.Millisecond}, false},
		{"three samples over 10 s", []time.Duration{0, 5 * time.Second, 10 * time.Second}, false},
		{"two samples over a minute", []time.Duration{0, time.Minute}, false},
		{"three samples over 30 s", []time.Duration{0, 15 * time.Second, 30 * time.Second}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &rssSampler{}
			for i, at := range c.at {
				s.samples = append(s.samples, rssSample{at: at, rss: float64(100 + i*10)})
			}
			rep := &Report{}
			note := s.report(rep, 0)
			_, got := rep.Get(MetricRSSSlope)
			if got != c.slope || (note == "") != c.slope {
				t.Fatalf("slope reported %v (note %q), want %v", got, note, c.slope)
			}
			if !c.slope && !strings.Contains(note, "too few") {
				t.Errorf("the note %q does not say the samples are too few", note)
			}
			for _, m := range rep.Metrics {
				if m.Name == MetricRSSSlope && m.Unit != UnitBytesPerMin {
					t.Errorf("%s unit %q, want %q", m.Name, m.Unit, UnitBytesPerMin)
				}
			}
		})
	}
}
