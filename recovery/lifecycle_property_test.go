package recovery

import (
	"maps"
	"slices"
	"testing"

	"github.com/kvindex/kvindex/event"
	"pgregory.net/rapid"
)

// lifecycleDriver executes decisions as the lanes do, and keeps what the lanes keep durable: the
// cursor, the degraded flag and the pending events (Decision.Buffered / Pending*). It remembers
// what happened to every acknowledged event so the property can check docs/CONTRACT.md §5 lifecycle rule 1.
type lifecycleDriver struct {
	inflight  *FetchRequest
	durable   map[uint64]event.RouterEvent // the durable copy of the pending events
	applied   map[uint64]bool              // ids applied since the rank was (re)created
	lost      []IDRange
	clearedTo uint64 // the highest id of an applied Cleared or TreeDump: older ids are erased
	resetTo   uint64 // the highest id below a reset: the reset erased what came before
	hasReset  bool
}

func newLifecycleDriver() *lifecycleDriver {
	return &lifecycleDriver{durable: map[uint64]event.RouterEvent{}, applied: map[uint64]bool{}}
}

func (r *lifecycleDriver) exec(t *rapid.T, s *Machine, before Cursor, ev *event.RouterEvent, d Decision) {
	checkDecision(t, s, before, d)
	if d.CancelFetch {
		if r.inflight == nil || r.inflight.Token != d.CancelToken {
			t.Fatalf("cancels #%d, in flight %v", d.CancelToken, r.inflight)
		}
		r.inflight = nil
	}
	if d.Reset && before.HasLast {
		r.resetTo, r.hasReset = max(r.resetTo, before.Last), true
	}
	if d.Replace != nil {
		r.clearedTo = max(r.clearedTo, d.Replace.LastEventID)
	}
	for i := range d.Apply {
		r.applied[d.Apply[i].EventID] = true
		if d.Apply[i].Kind == event.KindCleared {
			r.clearedTo = max(r.clearedTo, d.Apply[i].EventID)
		}
	}
	r.lost = append(r.lost, d.Lost...)
	if d.Buffered {
		r.durable[ev.EventID] = *ev
	}
	if d.PendingChanged {
		for id := range r.durable {
			if d.PendingEmpty || id < d.PendingFrom {
				delete(r.durable, id)
			}
		}
	}
	if d.Fetch != nil {
		if r.inflight != nil {
			t.Fatalf("second fetch #%d while #%d is in flight", d.Fetch.Token, r.inflight.Token)
		}
		f := *d.Fetch
		r.inflight = &f
	}
	if s.State() == StateRecovering && r.inflight == nil {
		t.Fatalf("rule 3: recovering with no fetch in flight: %s", describe(s))
	}
	// The durable copy holds exactly the buffered events (the driver persists what it is told).
	want := map[uint64]bool{}
	for i := range s.pending {
		want[s.pending[i].EventID] = true
	}
	got := map[uint64]bool{}
	for id := range r.durable {
		got[id] = true
	}
	if !maps.Equal(want, got) {
		t.Fatalf("durable pending %v, state pending %v after %s", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)), d.String())
	}
}

func (r *lifecycleDriver) inLost(id uint64) bool {
	for _, g := range r.lost {
		if g.First <= id && id <= g.Last {
			return true
		}
	}
	return false
}

// TestRule1AcknowledgedEventsNeverVanish (docs/CONTRACT.md §5 lifecycle rules 1 and 3) drives one rank with
// a random stream delivered with drops and reorders, answers that succeed or fail, the source
// set and removed, and restarts that rebuild the Machine from what the driver made durable
// (cursor, degraded flag, pending events). After everything is delivered and settled, every
// event that was acknowledged (not answered ignored) was applied, or lies in a recorded lost
// range, or was erased by a later Cleared, TreeDump or reset. And "recovering" always has a
// fetch in flight.
func TestRule1AcknowledgedEventsNeverVanish(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		hasSource := rapid.Bool().Draw(t, "source")
		pendingCap := rapid.IntRange(1, 12).Draw(t, "cap")
		up := newUpstream(rapid.IntRange(1, 24).Draw(t, "retain"))
		s := NewMachine(testRank, Options{HasSource: hasSource, PendingCap: pendingCap})
		r := newLifecycleDriver()
		acked := map[uint64]bool{}
		var net []event.RouterEvent
		live := func(ev event.RouterEvent) {
			before := s.Cursor()
			d := s.OnLive(&ev)
			if d.Ignored == 0 {
				acked[ev.EventID] = true
			}
			r.exec(t, s, before, &ev, d)
		}
		answer := func(mayFail bool) {
			req := *r.inflight
			r.inflight = nil
			a := up.answer(t, req)
			if mayFail && rapid.IntRange(0, 3).Draw(t, "fail") == 0 {
				a = Answer{Kind: AnswerFailed}
			}
			before := s.Cursor()
			r.exec(t, s, before, nil, s.OnAnswer(req.Token, a))
		}
		kinds := []event.Kind{event.KindStored, event.KindStored, event.KindStored, event.KindRemoved, event.KindCleared}
		for range rapid.IntRange(20, 200).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 12).Draw(t, "op"); {
			case op < 5:
				net = append(net, up.emit(t, rapid.SampledFrom(kinds).Draw(t, "kind")))
			case op < 9 && len(net) > 0:
				i := rapid.IntRange(0, min(len(net)-1, 3)).Draw(t, "reorder")
				ev := net[i]
				net = slices.Delete(net, i, i+1)
				if rapid.IntRange(0, 5).Draw(t, "drop") > 0 {
					live(ev)
				}
			case op == 9 && r.inflight != nil:
				answer(true)
			case op == 10:
				hasSource = !hasSource
				before := s.Cursor()
				r.exec(t, s, before, nil, s.SetHasSource(hasSource))
			case op == 11:
				// kill -9 and restart: only the durable state survives; an in-flight fetch is
				// gone with the process.
				pending := slices.Collect(maps.Values(r.durable))
				slices.SortFunc(pending, func(a, b event.RouterEvent) int { return int(a.EventID) - int(b.EventID) })
				s = Restore(testRank, s.Cursor(), s.Degraded(), pending, Options{HasSource: hasSource, PendingCap: pendingCap})
				r.inflight = nil
				before := s.Cursor()
				r.exec(t, s, before, nil, s.Resume())
			}
		}
		for _, ev := range net {
			live(ev)
		}
		for range 64 {
			if r.inflight == nil {
				break
			}
			answer(false)
		}
		if s.Recovering() || s.Pending() != 0 {
			t.Fatalf("did not settle: %s", describe(s))
		}
		for id := range acked {
			erased := id <= r.clearedTo || (r.hasReset && id <= r.resetTo)
			if !r.applied[id] && !r.inLost(id) && !erased {
				t.Fatalf("rule 1: acknowledged event %d was neither applied nor recorded lost (lost %v, cleared to %d, reset to %d); %s",
					id, r.lost, r.clearedTo, r.resetTo, describe(s))
			}
		}
	})
}
