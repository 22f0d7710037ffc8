package engine

import (
	"context"
	"errors"

	"github.com/kvindex/kvindex/dumpcache"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/recovery"
)

// RangeAnswer answers GET /v1/ranks/{w}/{r}/events for rk (its partition resolved by the
// caller; an unknown rank answers an empty TreeDump) by recovery.RangeRule. Exactly one of the
// results is set: an answer to encode, or a TreeDump body (shared: never append to it).
//
// newest and oldest are read on the rank's lane (consistent with its writes); the events
// themselves are read after, from one Pebble iterator, so the lane is not held for a long read.
func (s *Engine) RangeAnswer(ctx context.Context, rk Rank, req recovery.RangeRequest) (*recovery.Answer, []byte, error) {
	var (
		st   dumpcache.Stamp
		view recovery.RangeView
		err  error
	)
	if req.HasStart && !(req.HasEnd && req.End < req.Start) {
		derr := s.pipe.Do(ctx, rk, func() {
			st = s.rankStatus(rk)
			view.Known, view.Newest = st.Known, st.Last
			err = s.log.Range(rk, 0, 1, func(ev *event.RouterEvent) error {
				view.Oldest, view.HasOldest = ev.EventID, true
				return nil
			})
		})
		if derr != nil && !errors.Is(derr, ErrUnknownRank) {
			err = derr
		}
		if err != nil {
			return nil, nil, err
		}
		if s.testAfterOldest != nil {
			s.testAfterOldest(rk)
		}
	}
	switch recovery.RangeRule(req, view) {
	case recovery.AnswerInvalidRange:
		return &recovery.Answer{Kind: recovery.AnswerInvalidRange, StartID: req.Start, EndID: req.End}, nil, nil
	case recovery.AnswerTooNew:
		// requested_end is the end asked for, else the newest id (docs/CONTRACT.md §5).
		end := req.End
		if !req.HasEnd {
			end = view.Newest
		}
		return &recovery.Answer{Kind: recovery.AnswerTooNew, RequestedStart: req.Start, RequestedEnd: end, NewestAvailable: view.Newest}, nil, nil
	case recovery.AnswerTreeDump:
		body, err := s.dumps.TreeDump(ctx, rk)
		return nil, body, err
	}
	lim := -1 // no limit
	if req.Limit > 0 {
		lim = req.Limit
	}
	evs, err := s.rangeEvents(rk, req.Start, lim)
	if err != nil {
		return nil, nil, err
	}
	if s.StoreCause() != nil {
		// After a failed commit the log may still read the failed batch's events (Pebble put
		// them in its memtable before the WAL write or sync failed): never acknowledged, maybe
		// not durable. Serve the rank only up to its durable cursor, read on its lane above.
		evs = throughID(evs, st.Last)
	}
	if !startsAt(evs, req.Start, lim) {
		// Retention folded start away (or the rank was reset) after oldest was read: an Events
		// answer would start late and the consumer would record a false loss (docs/CONTRACT.md §5 lifecycle
		// rule 7). The rank's dump is exact.
		body, err := s.dumps.TreeDump(ctx, rk)
		return nil, body, err
	}
	a := recovery.Answer{Kind: recovery.AnswerEvents, Events: evs, LastEventID: max(req.Start, 1) - 1}
	if len(evs) > 0 {
		a.LastEventID = evs[len(evs)-1].EventID
	}
	return &a, nil, nil
}

// rangeEvents reads rk's log from start: every event from the last Cleared seen onwards, at
// most lim of them (lim < 0: no limit). Reading stops once lim events follow the last Cleared
// seen, so a Cleared beyond that page is only skipped to by a later page.
func (s *Engine) rangeEvents(rk Rank, start uint64, lim int) ([]event.RouterEvent, error) {
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

// startsAt reports whether a range read from start begins where it must: at start itself, or
// at a Cleared (what precedes a Cleared may be left out). An empty read (limit 0) is exact.
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

// rankStatus reads rk's status as the range rules and the TreeDump cache need it; call it on
// the rank's lane. A rank with no logged id yet (its first events buffered during a restore)
// has nothing to serve: unknown to the range rules.
func (s *Engine) rankStatus(rk Rank) dumpcache.Stamp {
	st, ok := s.pipe.RankStatus(rk)
	if !ok || !st.HasLast {
		return dumpcache.Stamp{}
	}
	return dumpcache.Stamp{Known: true, Last: st.Last, Lost: st.Lost, Rec: st.Recovered, Degraded: st.Degraded, Incarnation: st.Incarnation}
}

// SetTestAfterOldest installs a hook the range rules run between reading a rank's oldest id and
// reading its events (tests fold the log there).
func (s *Engine) SetTestAfterOldest(f func(Rank)) { s.testAfterOldest = f }
