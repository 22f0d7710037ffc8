package bench

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/server"
	"github.com/kvindex/kvindex/workload"
)

// TestLoadGenPhases: with Phases the stream is posted once per phase on fresh workers (the
// server's index equals one built from the stream and its shifted copies), the
// 100 % phase first and unpaced, each other paced at its share of the rate the first reached,
// and each phase reports its rates and round trips.
func TestLoadGenPhases(t *testing.T) {
	s, hs := loadTarget(t, server.Config{Lanes: 2})
	reqs := smallTrace(t, 60)
	wopts := workload.WorkloadOptions{Workers: 6}
	rep, err := LoadGen(context.Background(), LoadOptions{Target: hs.URL, Requests: reqs, Workload: wopts, Clients: 3, Batch: 5,
		Phases: []int{90, 50}, Logger: quiet(), HTTPClient: hs.Client()})
	if err != nil {
		t.Fatal(err)
	}
	unpaced, _ := rep.Get(PhaseMetric(100, PhaseEventsPerS))
	if !(unpaced > 0) {
		t.Fatalf("the 100%% phase reached %v events/s", unpaced)
	}
	for _, pct := range []int{100, 90, 50} {
		target, ok := rep.Get(PhaseMetric(pct, PhaseTargetRate))
		want := unpaced * float64(pct) / 100
		if pct == 100 {
			want = 0 // unpaced
		}
		if !ok || math.Abs(target-want) > 1e-6*unpaced {
			t.Errorf("phase %d%%: target %v (present %v), want %v", pct, target, ok, want)
		}
		for _, what := range []string{PhaseEventsPerS, PhaseQueries, PhaseFindP50, PhaseFindP99, PhaseHealthzP50, PhaseHealthzP99} {
			if v, ok := rep.Get(PhaseMetric(pct, what)); !ok || !(v > 0) {
				t.Errorf("%s = %v (present %v), want > 0", PhaseMetric(pct, what), v, ok)
			}
		}
	}
	wl, err := workload.Generate(reqs, 1, wopts)
	if err != nil {
		t.Fatal(err)
	}
	var span uint64
	for i := range wl.Events {
		span = max(span, wl.Events[i].WorkerID+1)
	}
	ref := index.New(index.Options{})
	for k := range 3 {
		for _, ev := range shiftWorkers(wl.Events, uint64(k)*span) {
			ref.Apply(&ev)
		}
	}
	if err := compareAll(context.Background(), wl.Queries, nonEmpty(wl.Queries), ref, s.Engine().Partitions().IndexOf(0)); err != nil {
		t.Fatalf("server index differs from the three phases' streams: %v", err)
	}
}

func TestLoadGenPhasesOptions(t *testing.T) {
	for _, o := range []LoadOptions{
		{Phases: []int{0}}, {Phases: []int{101}}, {Phases: []int{50}, Loop: true},
	} {
		o.Target, o.Requests, o.Logger = "http://127.0.0.1:1", smallTrace(t, 3), quiet()
		if _, err := LoadGen(context.Background(), o); !errors.Is(err, ErrOptions) {
			t.Errorf("phases %v loop %v: %v, want ErrOptions", o.Phases, o.Loop, err)
		}
	}
	if got := shiftWorkers([]event.RouterEvent{{WorkerID: 3}}, 10); got[0].WorkerID != 13 {
		t.Errorf("shifted worker %d, want 13", got[0].WorkerID)
	}
}

// TestLoadGenRetries429: a batch answered 429 (the server's ingest bound full, no wait) is posted
// again after its Retry-After and counted; every event arrives.
func TestLoadGenRetries429(t *testing.T) {
	s, hs := loadTarget(t, server.Config{Lanes: 1, MaxIngestInFlight: 1, IngestWait: -1})
	_, release, err := s.Engine().Admit(context.Background(), 1, true)
	if err != nil {
		t.Fatal(err)
	}
	reqs := smallTrace(t, 20)
	wopts := workload.WorkloadOptions{Workers: 3}
	type result struct {
		rep *Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := LoadGen(context.Background(), LoadOptions{Target: hs.URL, Requests: reqs, Workload: wopts, Clients: 1, Batch: 5,
			IdleQueries: -1, RSSEvery: -1, Logger: quiet(), HTTPClient: hs.Client()})
		done <- result{rep, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for s.Engine().AdmissionStats().Rejected == 0 {
		if time.Now().After(deadline) {
			t.Fatal("loadgen's first batch was never refused with the bound held")
		}
		time.Sleep(time.Millisecond)
	}
	release()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	wl, err := workload.Generate(reqs, 1, wopts)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := res.rep.Get(MetricLoadAccepted); got != float64(len(wl.Events)) {
		t.Errorf("accepted %v, want %d", got, len(wl.Events))
	}
	if got, _ := res.rep.Get(MetricLoadRetried); got < 1 {
		t.Errorf("%s = %v, want ≥ 1", MetricLoadRetried, got)
	}
}
