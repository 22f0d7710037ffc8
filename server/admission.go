package server

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/kvindex/kvindex/engine"
	"github.com/prometheus/client_golang/prometheus"
)

// retryAfter is the Retry-After of a 429 for an ingest beyond the engine's bound, in whole
// seconds: the wait the batch was given (--ingest-wait), at least 1.
func (s *Server) retryAfter() string {
	return strconv.Itoa(max(1, int(math.Ceil(s.e.IngestWait().Seconds()))))
}

// admitIngest takes the share of an HTTP write of events (decoded, not yet placed) of the
// engine's ingest bound (engine.AdmitChecked, waiting at most --ingest-wait; check's refusal,
// made only when the write would wait, is answered as the ingest answers it). A write beyond the bound
// (engine.ErrOverloaded) is answered 429 with Retry-After and false; the caller then writes
// nothing. The context returned carries the share: the ingest under it takes none again;
// release frees it.
func (s *Server) admitIngest(w http.ResponseWriter, r *http.Request, events int, check func() error) (context.Context, func(), bool) {
	ctx, release, err := s.e.AdmitChecked(r.Context(), events, true, check)
	if err == nil {
		return ctx, release, true
	}
	var pe *engine.PlaceError
	if errors.As(err, &pe) { // check refused the write before it waited
		s.ingestError(w, err)
		return ctx, release, false
	}
	if errors.Is(err, engine.ErrOverloaded) {
		w.Header().Set("Retry-After", s.retryAfter())
		writeError(w, http.StatusTooManyRequests, err.Error())
		return ctx, release, false
	}
	s.submitError(w, err) // the client went away while waiting
	return ctx, release, false
}

var (
	descIngestBound    = prometheus.NewDesc("kvindex_ingest_inflight_bound", "Events in flight at most over every ingest door (--max-ingest-inflight).", nil, nil)
	descIngestInFlight = prometheus.NewDesc("kvindex_ingest_inflight", "Events admitted and not yet durable and applied, over every ingest door (a batch larger than the bound counts as the bound).", nil, nil)
	descIngestWaiting  = prometheus.NewDesc("kvindex_ingest_waiting", "Event batches waiting for their share of the ingest bound now.", nil, nil)
	descIngestAdmitted = prometheus.NewDesc("kvindex_ingest_admitted_total", "Event batches admitted by the ingest bound.", nil, nil)
	descIngestWaited   = prometheus.NewDesc("kvindex_ingest_admission_waits_total", "Event batches that waited for their share of the ingest bound (it was full when they came).", nil, nil)
	descIngestRejected = prometheus.NewDesc("kvindex_ingest_rejected_total", "HTTP event batches answered 429: their share of the ingest bound did not free within --ingest-wait.", nil, nil)
)

// admissionCollector exports the engine's admission counters at scrape time.
type admissionCollector struct{ e *engine.Engine }

func (c admissionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIngestBound, descIngestInFlight, descIngestWaiting, descIngestAdmitted, descIngestWaited, descIngestRejected} {
		ch <- d
	}
}

func (c admissionCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.e.AdmissionStats()
	ch <- prometheus.MustNewConstMetric(descIngestBound, prometheus.GaugeValue, float64(st.Bound))
	ch <- prometheus.MustNewConstMetric(descIngestInFlight, prometheus.GaugeValue, float64(st.InFlight))
	ch <- prometheus.MustNewConstMetric(descIngestWaiting, prometheus.GaugeValue, float64(st.Waiting))
	ch <- prometheus.MustNewConstMetric(descIngestAdmitted, prometheus.CounterValue, float64(st.Admitted))
	ch <- prometheus.MustNewConstMetric(descIngestWaited, prometheus.CounterValue, float64(st.Waited))
	ch <- prometheus.MustNewConstMetric(descIngestRejected, prometheus.CounterValue, float64(st.Rejected))
}
