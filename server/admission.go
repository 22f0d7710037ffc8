package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/kvindex/kvindex/engine"
	"github.com/prometheus/client_golang/prometheus"
)

// retryAfterSeconds is the Retry-After of a 429 for an ingest beyond the engine's bound: the
// header counts whole seconds, and a second is the wait the batch was already given by default.
const retryAfterSeconds = 1

// admitIngest takes the engine's ingest slot for one HTTP write (engine.Admit, bounded by
// --ingest-wait) before its body is decoded. A write beyond the bound (engine.ErrOverloaded) is
// answered 429 with Retry-After and false; the caller then writes nothing. The context returned
// carries the slot: the ingest under it takes no second one; release frees it.
func (s *Server) admitIngest(w http.ResponseWriter, r *http.Request) (context.Context, func(), bool) {
	ctx, release, err := s.e.Admit(r.Context(), true)
	if err == nil {
		return ctx, release, true
	}
	if errors.Is(err, engine.ErrOverloaded) {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
		writeError(w, http.StatusTooManyRequests, err.Error())
		return ctx, release, false
	}
	s.submitError(w, err) // the client went away while waiting
	return ctx, release, false
}

var (
	descIngestBound    = prometheus.NewDesc("kvindex_ingest_inflight_bound", "Event batches in flight at most over every ingest door (--max-ingest-inflight).", nil, nil)
	descIngestInFlight = prometheus.NewDesc("kvindex_ingest_inflight", "Event batches admitted and not yet durable and applied, over every ingest door.", nil, nil)
	descIngestWaiting  = prometheus.NewDesc("kvindex_ingest_waiting", "Event batches waiting for an ingest slot now.", nil, nil)
	descIngestAdmitted = prometheus.NewDesc("kvindex_ingest_admitted_total", "Event batches admitted by the ingest bound.", nil, nil)
	descIngestWaited   = prometheus.NewDesc("kvindex_ingest_admission_waits_total", "Event batches that waited for an ingest slot (the bound was full when they came).", nil, nil)
	descIngestRejected = prometheus.NewDesc("kvindex_ingest_rejected_total", "HTTP event batches answered 429: no ingest slot freed within --ingest-wait.", nil, nil)
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
