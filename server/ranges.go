package server

import (
	"bytes"
	"net/http"
	"strconv"

	"github.com/kvindex/kvindex/event"
)

// rankEvents serves GET /v1/ranks/{worker_id}/{dp_rank}/events (SPEC §5 "Serving ranges"):
//
//  1. start and end given, end < start → InvalidRange
//  2. start absent                     → TreeDump (last_event_id = newest logged id or 0)
//  3. no retained log events           → TreeDump
//  4. start > newest                   → TooNew
//  5. start < oldest retained          → TreeDump
//  6. otherwise                        → Events from start to newest (end is not a cap), at most
//     limit, last_event_id = id of the last event returned
func (s *Server) rankEvents(w http.ResponseWriter, r *http.Request) {
	wid, err := pathU64(r, "worker_id", 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	dp, err := pathU64(r, "dp_rank", 32)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rk := event.Rank{WorkerID: wid, DPRank: uint32(dp)}
	q := r.URL.Query()
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
	if hasStart && hasEnd && end < start {
		writeRaw(w, []byte(`{"InvalidRange":{"start_id":`+u(start)+`,"end_id":`+u(end)+`}}`))
		return
	}
	var newest uint64
	var known bool
	var first uint64
	if err := s.pipe.Do(r.Context(), rk, func() {
		st, ok := s.pipe.RankStatus(rk)
		known = ok
		newest = st.Last
		first, err = s.log.First(rk)
	}); err != nil {
		s.submitError(w, err)
		return
	}
	if err != nil {
		s.submitError(w, err)
		return
	}
	treeDump := func() {
		// The dump and its last_event_id are read together on the rank's lane.
		var buf []byte
		var last uint64
		err := s.pipe.Do(r.Context(), rk, func() {
			if st, ok := s.pipe.RankStatus(rk); ok {
				last = st.Last
			}
			err = s.ix.DumpRank(rk, func(ev *event.RouterEvent) error {
				if len(buf) > 0 {
					buf = append(buf, ',')
				}
				buf = event.AppendJSON(buf, ev)
				return nil
			})
		})
		if err != nil {
			s.submitError(w, err)
			return
		}
		writeRaw(w, []byte(`{"TreeDump":{"events":[`+string(buf)+`],"last_event_id":`+u(last)+`}}`))
	}
	switch {
	case !hasStart || !known || first == 0:
		treeDump()
		return
	case start > newest:
		reqEnd := newest
		if hasEnd {
			reqEnd = end
		}
		writeRaw(w, []byte(`{"TooNew":{"requested_start":`+u(start)+`,"requested_end":`+u(reqEnd)+`,"newest_available":`+u(newest)+`}}`))
		return
	case start < first:
		treeDump()
		return
	}
	var buf bytes.Buffer
	buf.WriteString(`{"Events":{"events":[`)
	n, last := 0, uint64(0)
	var line []byte
	lim := 0
	if hasLimit {
		lim = int(limit)
		if lim == 0 {
			lim = -1
		}
	}
	if lim >= 0 {
		err = s.log.Range(rk, start, lim, func(ev *event.RouterEvent) error {
			if n > 0 {
				buf.WriteByte(',')
			}
			line = event.AppendJSON(line[:0], ev)
			buf.Write(line)
			n++
			last = ev.EventID
			return nil
		})
		if err != nil {
			s.submitError(w, err)
			return
		}
	}
	if n == 0 {
		last = start - 1
	}
	buf.WriteString(`],"last_event_id":` + u(last) + `}}`)
	writeRaw(w, buf.Bytes())
}

func u(x uint64) string { return strconv.FormatUint(x, 10) }

func writeRaw(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}
