package server

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/lanes"
	"github.com/kvindex/kvindex/recovery"
)

// rankEvents serves GET /v1/ranks/{worker_id}/{dp_rank}/events (SPEC §5 "Serving ranges"),
// answering exactly one of recovery's four wire shapes, by the first rule that applies:
//
//  1. start and end given, end < start → InvalidRange
//  2. start absent                     → TreeDump (last_event_id = newest logged id or 0)
//  3. no retained log events           → TreeDump
//  4. start > newest                   → TooNew (requested_end = end as given, 0 without end)
//  5. start < oldest retained          → TreeDump
//  6. otherwise                        → Events from start to newest (end is not a cap)
//
// Events: when a Cleared lies in [start, newest], the answer starts at the last one (what precedes
// it cannot matter to a consumer that applies the Cleared, which clears every tier, whatever tier
// it is tagged with; SPEC §7). With limit, at most limit events come back and last_event_id is
// the id of the last one returned (limit=0 is a 400, as is a query parameter other than start,
// end and limit).
//
// TreeDumps come from the single-flight, cached builder in dumpcache.go. newest and oldest are
// read on the rank's lane (consistent with its writes); the Events themselves are read after,
// from one Pebble iterator, so the lane is not held for a long read.
func (s *Server) rankEvents(w http.ResponseWriter, r *http.Request) {
	rk, err := pathRank(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	q := r.URL.Query()
	if err := checkQuery(q, append([]string{"start", "end", "limit"}, partitionParams...)...); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	// The rank's partition: the one the query names, else the worker's own. An unknown one
	// answers like an unknown rank (an empty TreeDump), creating nothing.
	var known bool
	if rk.Partition, known = s.rankPartition(r, rk.WorkerID); !known {
		rk.Partition = ^uint32(0)
	}
	opt := func(name string) (uint64, bool, bool) {
		v := q.Get(name)
		if v == "" {
			return 0, false, true
		}
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "query parameter "+name+"="+strconv.Quote(v)+" is not an unsigned 64-bit integer")
			return 0, false, false
		}
		return x, true, true
	}
	start, hasStart, ok := opt("start")
	if !ok {
		return
	}
	end, hasEnd, ok := opt("end")
	if !ok {
		return
	}
	limit, hasLimit, ok := opt("limit")
	if !ok {
		return
	}
	if hasLimit && limit == 0 {
		writeError(w, http.StatusBadRequest, "query parameter limit=0: want a page size ≥ 1 (omit limit for no limit)")
		return
	}
	if hasStart && hasEnd && end < start {
		s.writeAnswer(w, &recovery.Answer{Kind: recovery.AnswerInvalidRange, StartID: start, EndID: end})
		return
	}
	if !hasStart {
		s.serveTreeDump(w, r, rk)
		return
	}
	var (
		st        ruleStatus
		oldest    uint64
		hasOldest bool
	)
	if derr := s.pipe.Do(r.Context(), rk, func() {
		st = s.rankStatus(rk)
		err = s.log.Range(rk, 0, 1, func(ev *event.RouterEvent) error {
			oldest, hasOldest = ev.EventID, true
			return nil
		})
	}); derr != nil && !errors.Is(derr, lanes.ErrUnknownRank) {
		err = derr
	}
	if err != nil {
		s.submitError(w, err)
		return
	}
	if s.testAfterOldest != nil {
		s.testAfterOldest(rk)
	}
	switch {
	case !st.known || !hasOldest:
		s.serveTreeDump(w, r, rk)
		return
	case start > st.last:
		// requested_end echoes the request: 0 when it gave no end (the field stays on the wire).
		s.writeAnswer(w, &recovery.Answer{Kind: recovery.AnswerTooNew, RequestedStart: start, RequestedEnd: end, NewestAvailable: st.last})
		return
	case start < oldest:
		s.serveTreeDump(w, r, rk)
		return
	}
	lim := -1 // no limit
	if hasLimit {
		lim = int(min(limit, uint64(1<<31)))
	}
	evs, err := s.rangeEvents(rk, start, lim)
	if err != nil {
		s.submitError(w, err)
		return
	}
	if s.storeCause() != nil {
		// After a failed commit the log may still read the failed batch's events (Pebble put
		// them in its memtable before the WAL write or sync failed): never acknowledged, maybe
		// not durable. Serve the rank only up to its durable cursor, read on its lane above.
		evs = throughID(evs, st.last)
	}
	if !startsAt(evs, start, lim) {
		// Retention folded start away (or the rank was reset) after oldest was read: an Events
		// answer would start late and the consumer would record a false loss (SPEC §5 lifecycle
		// rule 7). The rank's dump is exact.
		s.serveTreeDump(w, r, rk)
		return
	}
	// Nothing returned (limit=0): the answer covers nothing past start-1 (0 for start 0).
	a := recovery.Answer{Kind: recovery.AnswerEvents, Events: evs, LastEventID: max(start, 1) - 1}
	if len(evs) > 0 {
		a.LastEventID = evs[len(evs)-1].EventID
	}
	s.writeAnswer(w, &a)
}

// rangeEvents reads rk's log from start: every event from the last Cleared seen
// onwards, at most lim of them (lim < 0: no limit). Reading stops once lim events follow the last
// Cleared seen, so a Cleared beyond that page is only skipped to by a later page.
func (s *Server) rangeEvents(rk event.Rank, start uint64, lim int) ([]event.RouterEvent, error) {
	if lim == 0 {
		return nil, nil
	}
	var evs []event.RouterEvent
	err := s.log.Range(rk, start, 0, func(ev *event.RouterEvent) error {
		if ev.Kind == event.KindCleared {
			evs = evs[:0]
		} else if lim > 0 && len(evs) == lim {
			return errPageFull
		}
		evs = append(evs, ev.Clone())
		return nil
	})
	if err != nil && !errors.Is(err, errPageFull) {
		return nil, err
	}
	return evs, nil
}

// throughID cuts evs (in id order) after the last event with an id ≤ last.
func throughID(evs []event.RouterEvent, last uint64) []event.RouterEvent {
	for i := range evs {
		if evs[i].EventID > last {
			return evs[:i]
		}
	}
	return evs
}

// startsAt reports whether a range read from start begins where it must: at start itself, or at a
// Cleared (what precedes a Cleared may be left out). An empty read (limit 0) is exact.
func startsAt(evs []event.RouterEvent, start uint64, lim int) bool {
	if lim == 0 {
		return true
	}
	if len(evs) == 0 {
		return false
	}
	first := &evs[0]
	return first.EventID == start || (first.Kind == event.KindCleared && first.EventID > start)
}

// errPageFull stops a range read once a page is full.
var errPageFull = errors.New("page full")

// ruleStatus is what the range rules and the dump cache need of a rank's status.
type ruleStatus struct {
	known       bool
	last        uint64
	lost, rec   uint64
	degraded    bool
	incarnation uint64
}

// rankStatus reads rk's status; call it on the rank's lane. A rank with no logged id yet (its
// first events buffered during a restore) has nothing to serve: unknown to the range rules.
func (s *Server) rankStatus(rk event.Rank) ruleStatus {
	st, ok := s.pipe.RankStatus(rk)
	if !ok || !st.HasLast {
		return ruleStatus{}
	}
	return ruleStatus{known: true, last: st.Last, lost: st.Lost, rec: st.Recovered, degraded: st.Degraded, incarnation: st.Incarnation}
}

func (s *Server) serveTreeDump(w http.ResponseWriter, r *http.Request, rk event.Rank) {
	body, err := s.treeDump(r.Context(), rk)
	if err != nil {
		if errors.Is(err, ErrDumpCacheClosed) {
			writeError(w, http.StatusServiceUnavailable, "shutting down")
			return
		}
		s.submitError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body) // shared with other requests: never appended to
}

func (s *Server) writeAnswer(w http.ResponseWriter, a *recovery.Answer) {
	b, err := recovery.AppendAnswerJSON(make([]byte, 0, 64+128*len(a.Events)), a)
	if err != nil {
		s.submitError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}
