package server

import (
	"net/http"
	"strconv"

	"github.com/kvindex/kvindex/recovery"
)

// rankEvents serves GET /v1/ranks/{worker_id}/{dp_rank}/events (docs/CONTRACT.md §5 "Serving ranges"),
// answering exactly one of recovery's four wire shapes, chosen by recovery.RangeRule in the
// engine (Engine.RangeAnswer), by the first rule that applies:
//
//  1. start and end given, end < start → InvalidRange
//  2. start absent                     → TreeDump (last_event_id = newest logged id or 0)
//  3. no retained log events           → TreeDump
//  4. start > newest                   → TooNew (requested_end = end as given, else newest)
//  5. start < oldest retained          → TreeDump
//  6. otherwise                        → Events from start to newest (end is not a cap)
//
// Events: when a Cleared lies in [start, newest], the answer starts at the last one (what precedes
// it cannot matter to a consumer that applies the Cleared, which clears every tier, whatever tier
// it is tagged with; docs/CONTRACT.md §7). With limit, at most limit events come back and last_event_id is
// the id of the last one returned (limit=0 is a 400, as is a query parameter other than start,
// end and limit).
//
// TreeDumps come from the single-flight, cached builder of package dumpcache. newest and oldest are
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
	req := recovery.RangeRequest{Start: start, HasStart: hasStart, End: end, HasEnd: hasEnd}
	if hasLimit {
		req.Limit = int(min(limit, uint64(1<<31)))
	}
	a, dump, err := s.e.RangeAnswer(r.Context(), rk, req)
	if err != nil {
		s.submitError(w, err)
		return
	}
	if a != nil {
		s.writeAnswer(w, a)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(dump) // shared with other requests: never appended to
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
