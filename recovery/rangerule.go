package recovery

// The range rules (docs/CONTRACT.md §5 "Serving ranges"): which of the four answers a range request gets,
// as a pure function of the request and what the serving side knows of the rank. The first rule
// that applies wins:
//
//  1. start and end given, end < start → InvalidRange
//  2. start absent                     → TreeDump (last_event_id = newest logged id or 0)
//  3. no retained log events           → TreeDump
//  4. start > newest                   → TooNew (requested_end = end as given, else newest)
//  5. start < oldest retained          → TreeDump
//  6. otherwise                        → Events from start to newest (end is not a cap)

// RangeRequest is a range request's query: start, end and limit (0: none), each maybe absent.
type RangeRequest struct {
	Start, End       uint64
	HasStart, HasEnd bool
	Limit            int
}

// RangeView is what the serving side knows of the rank, read on its lane: whether it has a
// logged id (Known) and its newest, and its oldest retained log event.
type RangeView struct {
	Known     bool
	Newest    uint64
	HasOldest bool
	Oldest    uint64
}

// RangeRule applies the six rules in order and returns the kind of answer the request gets
// (never AnswerFailed, the router's own).
func RangeRule(req RangeRequest, v RangeView) AnswerKind {
	switch {
	case req.HasStart && req.HasEnd && req.End < req.Start:
		return AnswerInvalidRange
	case !req.HasStart:
		return AnswerTreeDump
	case !v.Known || !v.HasOldest:
		return AnswerTreeDump
	case req.Start > v.Newest:
		return AnswerTooNew
	case req.Start < v.Oldest:
		return AnswerTreeDump
	}
	return AnswerEvents
}
