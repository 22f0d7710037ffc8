package server

import (
	"errors"
	"net/http"
	"time"

	"github.com/kvindex/kvindex/engine"
	"github.com/kvindex/kvindex/partition"
	"github.com/prometheus/client_golang/prometheus"
)

// Worker leases (engine/lease.go; docs/API.md "Leases"): the HTTP door.

// DefaultLeaseGrace is `kvindex serve --lease-grace`' default (engine.DefaultLeaseGrace).
const DefaultLeaseGrace = engine.DefaultLeaseGrace

// MaxLeaseTTL bounds a lease's ttl, `--source-lease`'s too (engine.MaxLeaseTTL).
const MaxLeaseTTL = engine.MaxLeaseTTL

type leaseJSON struct {
	WorkerID  uint64 `json:"worker_id"`
	TTLMs     int64  `json:"ttl_ms"`
	ExpiresAt string `json:"expires_at"`
	RemoveAt  string `json:"remove_at"` // expires_at + --lease-grace: the worker's ranks are removed then
	State     string `json:"state"`     // live or stale
	Implied   bool   `json:"implied"`   // implied by the worker's event source (--source-lease), not taken
}

// leaseTTL is a lease's ttl_ms as a duration, 0 when it is out of range (1 ms to a year).
func leaseTTL(ms uint64) time.Duration {
	if ms == 0 || ms > uint64(engine.MaxLeaseTTL.Milliseconds()) {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

func badLeaseTTL(field string) string {
	return "field " + field + " must be between 1 and " + engine.MaxLeaseTTL.String() + " in milliseconds"
}

// timeLayout is how the JSON APIs write a timestamp: RFC 3339 in UTC with milliseconds
// (docs/API.md; the OpenAPI document's Timestamp). Every timestamp field added to an answer uses it.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func rfc3339(t time.Time) string { return t.UTC().Format(timeLayout) }

// rfc3339Ptr is rfc3339 of *t, "" (omitted) for nil.
func rfc3339Ptr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return rfc3339(*t)
}

func leaseRow(l engine.Lease, st engine.LeaseState) leaseJSON {
	return leaseJSON{WorkerID: l.WorkerID, TTLMs: l.TTL.Milliseconds(), ExpiresAt: rfc3339(l.Deadline), RemoveAt: rfc3339(l.RemoveAt), State: st.String(), Implied: l.Implied}
}

// putLease is PUT /v1/workers/{worker_id}/lease {"ttl_ms": n}: take or renew the worker's lease.
func (s *Server) putLease(w http.ResponseWriter, r *http.Request) {
	wid, ok := pathWorker(w, r)
	if !ok {
		return
	}
	if err := checkQuery(r.URL.Query(), partitionParams...); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	body, _, ok := s.readBody(w, r, bodyJSON)
	if !ok {
		return
	}
	var req struct {
		TTLMs *uint64 `json:"ttl_ms"`
		partitionNames
	}
	if err := decodeStrict(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.TTLMs == nil {
		writeError(w, http.StatusBadRequest, "missing field ttl_ms")
		return
	}
	ttl := leaseTTL(*req.TTLMs)
	if ttl == 0 {
		writeError(w, http.StatusBadRequest, badLeaseTTL("ttl_ms"))
		return
	}
	var key *partition.Key
	if req.partitionNames != (partitionNames{}) || namesPartition(r) {
		k := partitionKey(r, req.partitionNames)
		key = &k
	}
	l, err := s.e.SetLease(r.Context(), wid, ttl, key)
	switch {
	case errors.Is(err, partition.ErrWorkerElsewhere):
		msg, _ := elsewhereFix(err)
		writeError(w, http.StatusConflict, msg)
		return
	case errors.Is(err, engine.ErrBadLease):
		writeError(w, http.StatusBadRequest, err.Error())
		return
	case err != nil:
		s.submitError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"expires_at": rfc3339(l.Deadline), "remove_at": rfc3339(l.RemoveAt), "ttl_ms": l.TTL.Milliseconds()})
}

// deleteLease is DELETE /v1/workers/{worker_id}/lease: end the lease (the worker is then one that
// never took a lease).
func (s *Server) deleteLease(w http.ResponseWriter, r *http.Request) {
	wid, ok := pathWorker(w, r)
	if !ok {
		return
	}
	if err := checkQuery(r.URL.Query()); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	l, err := s.e.SetLease(r.Context(), wid, 0, nil) // ttl 0 ends it
	if err != nil {
		s.submitError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ended": !l.Deadline.IsZero()})
}

// listLeases is GET /v1/leases: every lease, by worker id.
func (s *Server) listLeases(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r.URL.Query()); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out := []leaseJSON{}
	for _, wk := range s.e.Workers() {
		if wk.LeaseState != engine.LeaseNone {
			out = append(out, leaseRow(wk.Lease, wk.LeaseState))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// setLeaseFields fills a /v1/ranks row's lease fields.
func (s *Server) setLeaseFields(row *rankJSON) {
	wk, _ := s.e.Worker(row.WorkerID)
	if wk.LeaseState == engine.LeaseNone {
		return
	}
	row.Stale = wk.LeaseState == engine.LeaseStale
	row.LeaseExpiresAt = rfc3339(wk.Lease.Deadline)
}

// leaseCollector exports the leases: by state, the ranks of stale workers, and the sweep's
// removals.
type leaseCollector struct{ s *Server }

var (
	descLeases       = prometheus.NewDesc("kvindex_leases", "Worker leases by state (live, stale: expired, its ranks left out of answers).", []string{"state"}, nil)
	descStaleRanks   = prometheus.NewDesc("kvindex_stale_ranks", "Ranks of workers whose lease expired: kept, but left out of answers until a renewal or their removal.", nil, nil)
	descLeaseRemoved = prometheus.NewDesc("kvindex_lease_removals_total", "Workers removed (their ranks, durably) because their lease expired more than --lease-grace ago.", nil, nil)
	descLeaseRanks   = prometheus.NewDesc("kvindex_lease_removed_ranks_total", "Ranks removed with workers whose lease expired more than --lease-grace ago.", nil, nil)
)

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeases, descStaleRanks, descLeaseRemoved, descLeaseRanks} {
		ch <- d
	}
}

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.s.e
	if e == nil {
		return
	}
	var live, stale, staleRanks int
	for _, wk := range e.Workers() {
		switch wk.LeaseState {
		case engine.LeaseLive:
			live++
		case engine.LeaseStale:
			stale++
			staleRanks += len(e.RanksOfWorker(wk.Worker))
		}
	}
	ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(live), "live")
	ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(stale), "stale")
	ch <- prometheus.MustNewConstMetric(descStaleRanks, prometheus.GaugeValue, float64(staleRanks))
	cs := e.LeaseCounters()
	ch <- prometheus.MustNewConstMetric(descLeaseRemoved, prometheus.CounterValue, float64(cs.Removed))
	ch <- prometheus.MustNewConstMetric(descLeaseRanks, prometheus.CounterValue, float64(cs.RemovedRanks))
}

// leaseRows are the status page's leases (stale first, then by worker id), their times as the
// JSON API writes them (rfc3339).
func (s *Server) leaseRows() []leaseJSON {
	var live, stale []leaseJSON
	for _, wk := range s.e.Workers() {
		row := leaseRow(wk.Lease, wk.LeaseState)
		switch wk.LeaseState {
		case engine.LeaseStale:
			stale = append(stale, row)
		case engine.LeaseLive:
			live = append(live, row)
		}
	}
	return append(stale, live...)
}
