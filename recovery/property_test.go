package recovery

import (
	"maps"
	"slices"
	"testing"

	"github.com/kvindex/kvindex/event"
	"pgregory.net/rapid"
)

// upstream is a worker's event stream and the range route over it (docs/CONTRACT.md §5 "Serving ranges"):
// a held-block set, a log that retains the last `retain` events, ids rising from 5.
type upstream struct {
	next     uint64 // next event id
	log      []event.RouterEvent
	retain   int
	held     map[uint64]bool
	blockSeq uint64
}

func newUpstream(retain int) *upstream {
	return &upstream{next: 5, retain: retain, held: map[uint64]bool{}}
}

func (u *upstream) newest() uint64 {
	if u.next == 5 {
		return 0
	}
	return u.next - 1
}

// emit appends one event of kind k and returns it.
func (u *upstream) emit(t *rapid.T, k event.Kind) event.RouterEvent {
	id := u.next
	u.next++
	var ev event.RouterEvent
	switch k {
	case event.KindStored:
		u.blockSeq++
		h := u.blockSeq
		u.held[h] = true
		ev = event.Stored(testRank, id, nil, event.Block{BlockHash: h, TokensHash: h})
	case event.KindRemoved:
		var h uint64 = 1 << 40 // unknown to everyone when nothing is held
		if len(u.held) > 0 {
			keys := slices.Sorted(maps.Keys(u.held))
			h = rapid.SampledFrom(keys).Draw(t, "removed")
		}
		delete(u.held, h)
		ev = event.Removed(testRank, id, h)
	default:
		clear(u.held)
		ev = event.Cleared(testRank, id)
	}
	u.log = append(u.log, ev)
	if len(u.log) > u.retain {
		u.log = u.log[len(u.log)-u.retain:]
	}
	return ev
}

func (u *upstream) dump() Answer {
	a := Answer{Kind: AnswerTreeDump, LastEventID: u.newest()}
	for _, h := range slices.Sorted(maps.Keys(u.held)) {
		a.Events = append(a.Events, event.Stored(testRank, 0, nil, event.Block{BlockHash: h, TokensHash: h}))
	}
	return a
}

// answer serves range(start) as docs/CONTRACT.md §5 orders the cases.
func (u *upstream) answer(t *rapid.T, req FetchRequest) Answer {
	if req.Full || len(u.log) == 0 {
		return u.dump()
	}
	oldest, newest := u.log[0].EventID, u.newest()
	switch {
	case req.Start > newest:
		return Answer{Kind: AnswerTooNew, RequestedStart: req.Start, RequestedEnd: newest, NewestAvailable: newest}
	case req.Start < oldest:
		return u.dump()
	}
	evs := slices.Clone(u.log[req.Start-oldest:])
	if rapid.Bool().Draw(t, "trim-before-cleared") {
		for i := len(evs) - 1; i > 0; i-- {
			if evs[i].Kind == event.KindCleared {
				evs = evs[i:]
				break
			}
		}
	}
	return Answer{Kind: AnswerEvents, Events: evs, LastEventID: newest}
}

// router executes decisions into a held-block set, as the lanes would into the tree.
type router struct {
	held     map[uint64]bool
	inflight *FetchRequest
	lost     int
	degraded bool // the rank was degraded after some decision
	fetches  int
}

func (r *router) apply(ev *event.RouterEvent) {
	switch ev.Kind {
	case event.KindStored:
		for _, b := range ev.Blocks {
			r.held[b.BlockHash] = true
		}
	case event.KindRemoved:
		for _, h := range ev.Removed {
			delete(r.held, h)
		}
	default:
		clear(r.held)
	}
}

func (r *router) exec(t *rapid.T, s *Machine, before Cursor, d Decision) {
	checkDecision(t, s, before, d)
	if d.CancelFetch {
		if r.inflight == nil || r.inflight.Token != d.CancelToken {
			t.Fatalf("cancels #%d, in flight %v", d.CancelToken, r.inflight)
		}
		r.inflight = nil
	}
	if d.Reset || d.Replace != nil {
		clear(r.held)
	}
	if d.Replace != nil {
		for i := range d.Replace.Events {
			r.apply(&d.Replace.Events[i])
		}
	}
	for i := range d.Apply {
		r.apply(&d.Apply[i])
	}
	r.lost += len(d.Lost)
	r.degraded = r.degraded || d.Degraded
	if d.Fetch != nil {
		if r.inflight != nil {
			t.Fatalf("second fetch #%d while #%d is in flight", d.Fetch.Token, r.inflight.Token)
		}
		f := *d.Fetch
		r.inflight = &f
		r.fetches++
	}
}

// TestRecoveryConverges: a random upstream stream delivered live with drops, duplicates and
// reorders, answers computed from the upstream (Events from its retained log, TreeDump when the
// start is older) and sometimes failing. After the final event is delivered and every recovery
// answered (a degraded rank is asked to restore), the router's state equals the upstream's.
// When no failure is injected nothing is ever lost or degraded. Without a source, delivery is
// in order with duplicates.
func TestRecoveryConverges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		source := rapid.Bool().Draw(t, "source")
		up := newUpstream(rapid.IntRange(1, 24).Draw(t, "retain"))
		s := NewMachine(testRank, Options{HasSource: source, PendingCap: rapid.IntRange(1, 12).Draw(t, "cap")})
		r := &router{held: map[uint64]bool{}}
		failures := source && rapid.Bool().Draw(t, "failures")
		var net []event.RouterEvent
		live := func(ev event.RouterEvent) {
			before := s.Cursor()
			r.exec(t, s, before, s.OnLive(&ev))
		}
		answer := func(mayFail bool) {
			req := *r.inflight
			r.inflight = nil
			a := up.answer(t, req)
			if mayFail && rapid.IntRange(0, 4).Draw(t, "fail") == 0 {
				a = Answer{Kind: AnswerFailed}
			}
			before := s.Cursor()
			r.exec(t, s, before, s.OnAnswer(req.Token, a))
		}
		kinds := []event.Kind{event.KindStored, event.KindStored, event.KindStored, event.KindRemoved, event.KindRemoved, event.KindCleared}
		steps := rapid.IntRange(40, 300).Draw(t, "steps")
		for range steps {
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 5:
				net = append(net, up.emit(t, rapid.SampledFrom(kinds).Draw(t, "kind")))
			case op < 9 && len(net) > 0:
				i := 0
				if source {
					i = rapid.IntRange(0, min(len(net)-1, 3)).Draw(t, "reorder")
				}
				ev := net[i]
				switch fate := rapid.IntRange(0, 9).Draw(t, "fate"); {
				case fate == 0 && source: // dropped
					net = slices.Delete(net, i, i+1)
				case fate == 1: // duplicated: delivered, and delivered again later
					live(ev)
				default:
					net = slices.Delete(net, i, i+1)
					live(ev)
				}
			case op == 9 && r.inflight != nil:
				answer(failures)
			}
		}
		// The end: whatever is still on the wire arrives in order, then one last event.
		for _, ev := range net {
			live(ev)
		}
		live(up.emit(t, event.KindStored))
		for range 64 {
			switch {
			case r.inflight != nil:
				answer(false)
				continue
			case s.Degraded():
				before := s.Cursor()
				r.exec(t, s, before, s.RequestRestore())
				continue
			}
			break
		}
		if s.Recovering() || s.Degraded() {
			t.Fatalf("did not settle: %s", describe(s))
		}
		if s.Cursor() != LiveCursor(up.newest()) || s.Pending() != 0 || s.State() != StateLive {
			t.Fatalf("rank %s, upstream newest %d", describe(s), up.newest())
		}
		if !maps.Equal(r.held, up.held) {
			t.Fatalf("router holds %v, upstream %v", slices.Sorted(maps.Keys(r.held)), slices.Sorted(maps.Keys(up.held)))
		}
		if !failures && (r.lost != 0 || r.degraded) {
			// With a source whose answers succeed every gap is recoverable; without one,
			// in-order delivery has no gaps.
			t.Fatalf("no failure injected, yet %d ranges lost (degraded: %v)", r.lost, r.degraded)
		}
		t.Logf("fetches=%d", r.fetches)
	})
}
