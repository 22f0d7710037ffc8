package recovery

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/kvindex/kvindex/event"
)

var testRank = event.Rank{WorkerID: 7, DPRank: 1}

// TestMachine runs the scripts in testdata/rankstate. Commands:
//
//	new [source] [cap=N] [restore=N [initial] [degraded] [pending=A..B]]
//	live [summary]       input: one event per line: "stored|removed|cleared ID" or "KIND A..B"
//	answer token=N       input: first line "events last=N" | "dump last=N" |
//	                     "toonew start=N newest=N" | "invalid start=N end=N" | "failed",
//	                     then the answer's events as for live
//	source on|off | request-restore | resume
//
// Every command prints the decisions and then the rank's state; the harness checks the
// package's invariants after every decision.
func TestMachine(t *testing.T) {
	datadriven.Walk(t, "testdata/rankstate", func(t *testing.T, path string) {
		var s *Machine
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			var out strings.Builder
			step := func(label string, before Cursor, d Decision) {
				checkDecision(t, s, before, d)
				if label != "" {
					fmt.Fprintf(&out, "%s -> %s\n", label, d.String())
				} else {
					fmt.Fprintf(&out, "%s\n", d.String())
				}
			}
			switch td.Cmd {
			case "new":
				opts := Options{HasSource: td.HasArg("source")}
				td.MaybeScanArgs(t, "cap", &opts.PendingCap)
				if td.HasArg("restore") {
					var last uint64
					td.ScanArgs(t, "restore", &last)
					var pending []event.RouterEvent
					if td.HasArg("pending") {
						var span string
						td.ScanArgs(t, "pending", &span)
						pending = parseEvents(t, "stored "+span)
					}
					cur := LiveCursor(last)
					if td.HasArg("initial") {
						cur = Cursor{}
					}
					s = Restore(testRank, cur, td.HasArg("degraded"), pending, opts)
				} else {
					s = NewMachine(testRank, opts)
				}
			case "live":
				evs := parseEvents(t, td.Input)
				if td.HasArg("summary") {
					var sum summary
					for i := range evs {
						before := s.Cursor()
						d := s.OnLive(&evs[i])
						checkDecision(t, s, before, d)
						sum.add(d)
					}
					fmt.Fprintf(&out, "%d events -> %s\n", len(evs), sum.String())
					break
				}
				for i := range evs {
					before := s.Cursor()
					d := s.OnLive(&evs[i])
					step(kindLetter(evs[i].Kind)+strconv.FormatUint(evs[i].EventID, 10), before, d)
				}
			case "answer":
				var token uint64
				td.ScanArgs(t, "token", &token)
				a := parseAnswer(t, td.Input)
				before := s.Cursor()
				step("", before, s.OnAnswer(token, a))
			case "resume":
				before := s.Cursor()
				step("", before, s.Resume())
			case "source":
				before := s.Cursor()
				step("", before, s.SetHasSource(td.CmdArgs[0].Key == "on"))
			case "request-restore":
				before := s.Cursor()
				step("", before, s.RequestRestore())
			default:
				td.Fatalf(t, "unknown command %q", td.Cmd)
			}
			fmt.Fprintf(&out, "state: %s", describe(s))
			return out.String()
		})
	})
}

// describe prints the rank's observable state.
func describe(s *Machine) string {
	var ids []uint64
	for i := range s.pending {
		ids = append(ids, s.pending[i].EventID)
	}
	return fmt.Sprintf("cursor=%s %s pending=%s", s.Cursor(), s.State(), rangesString(toRanges(ids)))
}

// toRanges compresses sorted ids into ranges.
func toRanges(ids []uint64) []IDRange {
	var out []IDRange
	for _, id := range ids {
		if n := len(out); n > 0 && out[n-1].Last+1 == id {
			out[n-1].Last = id
			continue
		}
		out = append(out, IDRange{First: id, Last: id})
	}
	return out
}

// fataler is what checkDecision needs of *testing.T and *rapid.T.
type fataler interface {
	Fatalf(format string, args ...any)
}

// checkDecision asserts the invariants of doc.go after a decision.
func checkDecision(t fataler, s *Machine, before Cursor, d Decision) {
	for i := 1; i < len(s.pending); i++ {
		if s.pending[i-1].EventID >= s.pending[i].EventID {
			t.Fatalf("pending not sorted/unique: %d then %d", s.pending[i-1].EventID, s.pending[i].EventID)
		}
	}
	for i := range s.pending {
		if s.cursor.HasLast && s.pending[i].EventID <= s.cursor.Last {
			t.Fatalf("pending %d at or below cursor %v", s.pending[i].EventID, s.cursor)
		}
		if s.pending[i].Kind == event.KindCleared {
			t.Fatalf("a Cleared is pending")
		}
	}
	if !s.inflight && len(s.pending) > 0 {
		t.Fatalf("%d events pending and no recovery in flight", len(s.pending))
	}
	if len(s.pending) > s.pendingCap {
		t.Fatalf("pending %d above cap %d", len(s.pending), s.pendingCap)
	}
	if d.Fetch != nil && (!s.inflight || d.Fetch.Token != s.token) {
		t.Fatalf("decision fetches #%d but the state has inflight=%v token=%d", d.Fetch.Token, s.inflight, s.token)
	}
	if s.inflight && d.Fetch == nil && d.Recovering != true {
		t.Fatalf("in flight but the decision says not recovering")
	}
	if d.Degraded != s.Degraded() || d.Recovering != s.Recovering() {
		t.Fatalf("decision flags disagree with the state")
	}
	// Applied ids rise above the cursor found, unless the decision resets or replaces, or a
	// Cleared resets the run.
	cur := before
	if d.Reset || d.Replace != nil {
		cur = Cursor{}
		if d.Replace != nil {
			cur = LiveCursor(d.Replace.LastEventID)
		}
	}
	for i := range d.Apply {
		e := &d.Apply[i]
		if cur.HasLast && e.EventID <= cur.Last && e.Kind != event.KindCleared && !(d.NewEpoch && i == 1) {
			t.Fatalf("applies %d at or below %v: %s", e.EventID, cur, d.String())
		}
		cur = LiveCursor(e.EventID)
	}
	if len(d.Apply) > 0 && s.cursor.Last < d.Apply[len(d.Apply)-1].EventID {
		t.Fatalf("cursor %v behind the last applied id %d", s.cursor, d.Apply[len(d.Apply)-1].EventID)
	}
}

type summary struct {
	applied           []uint64
	ignored, dropped  int
	fetches           []string
	lost, recoveredRs []IDRange
	resets            int
}

func (m *summary) add(d Decision) {
	for i := range d.Apply {
		m.applied = append(m.applied, d.Apply[i].EventID)
	}
	m.ignored += d.Ignored
	m.dropped += d.Dropped
	if d.Fetch != nil {
		f := *d.Fetch
		m.fetches = append(m.fetches, (&Decision{Fetch: &f}).String())
	}
	m.lost = append(m.lost, d.Lost...)
	m.recoveredRs = append(m.recoveredRs, d.Recovered...)
	if d.Reset {
		m.resets++
	}
}

func (m *summary) String() string {
	return fmt.Sprintf("applied=%s ignored=%d dropped=%d resets=%d lost=%s fetches=%v",
		rangesString(toRanges(m.applied)), m.ignored, m.dropped, m.resets, rangesString(m.lost), m.fetches)
}

// parseEvents reads "KIND ID" or "KIND A..B" lines.
func parseEvents(t *testing.T, input string) []event.RouterEvent {
	t.Helper()
	var evs []event.RouterEvent
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("bad event line %q", line)
		}
		lo, hi := f[1], f[1]
		if a, b, ok := strings.Cut(f[1], ".."); ok {
			lo, hi = a, b
		}
		first, err1 := strconv.ParseUint(lo, 10, 64)
		last, err2 := strconv.ParseUint(hi, 10, 64)
		if err1 != nil || err2 != nil || last < first {
			t.Fatalf("bad ids in %q", line)
		}
		for id := first; id <= last; id++ {
			switch f[0] {
			case "stored":
				evs = append(evs, event.Stored(testRank, id, nil, event.Block{BlockHash: id, TokensHash: id}))
			case "removed":
				evs = append(evs, event.Removed(testRank, id, id))
			case "cleared":
				evs = append(evs, event.Cleared(testRank, id))
			default:
				t.Fatalf("bad kind in %q", line)
			}
		}
	}
	return evs
}

func parseAnswer(t *testing.T, input string) Answer {
	t.Helper()
	head, rest, _ := strings.Cut(strings.TrimSpace(input), "\n")
	f := strings.Fields(head)
	arg := func(name string) uint64 {
		for _, kv := range f[1:] {
			if k, v, ok := strings.Cut(kv, "="); ok && k == name {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatalf("bad %s in %q", name, head)
				}
				return n
			}
		}
		t.Fatalf("missing %s in %q", name, head)
		return 0
	}
	switch f[0] {
	case "events":
		return Answer{Kind: AnswerEvents, Events: parseEvents(t, rest), LastEventID: arg("last")}
	case "dump":
		return Answer{Kind: AnswerTreeDump, Events: parseEvents(t, rest), LastEventID: arg("last")}
	case "toonew":
		return Answer{Kind: AnswerTooNew, RequestedStart: arg("start"), RequestedEnd: arg("newest"), NewestAvailable: arg("newest")}
	case "invalid":
		return Answer{Kind: AnswerInvalidRange, StartID: arg("start"), EndID: arg("end")}
	case "failed":
		return Answer{Kind: AnswerFailed, Err: errors.New("connection refused")}
	}
	t.Fatalf("bad answer %q", head)
	return Answer{}
}

// TestDecisionFailureWraps checks the error vocabulary of failed recoveries.
func TestDecisionFailureWraps(t *testing.T) {
	cause := errors.New("boom")
	for _, tc := range []struct {
		a    Answer
		want error
	}{
		{Answer{Kind: AnswerTooNew, RequestedStart: 5, NewestAvailable: 3}, ErrTooNew},
		{Answer{Kind: AnswerInvalidRange, StartID: 5, EndID: 3}, ErrInvalidRange},
		{Answer{Kind: AnswerFailed, Err: cause}, cause},
		{Answer{Kind: AnswerFailed, Err: cause}, ErrFetchFailed},
		{Answer{Kind: AnswerFailed}, ErrFetchFailed},
	} {
		s := Restore(testRank, LiveCursor(10), false, nil, Options{HasSource: true})
		ev := event.Stored(testRank, 12, nil)
		d := s.OnLive(&ev)
		d = s.OnAnswer(d.Fetch.Token, tc.a)
		if !errors.Is(d.Failure, tc.want) {
			t.Errorf("%v: failure %v does not wrap %v", tc.a.Kind, d.Failure, tc.want)
		}
		// Lifecycle rule 1: the buffered event 12 was acknowledged; the failure records 11 lost,
		// resets the rank and applies 12, degraded.
		if s.Cursor() != LiveCursor(12) || !d.Degraded || !d.Reset || len(d.Apply) != 1 || len(d.Lost) != 1 || d.Lost[0] != (IDRange{11, 11}) {
			t.Errorf("%v: after failure %s cursor=%v degraded=%v", tc.a.Kind, d.String(), s.Cursor(), d.Degraded)
		}
	}
}

// BenchmarkOnLiveContiguous measures the hot path: a contiguous live event on a live rank.
func BenchmarkOnLiveContiguous(b *testing.B) {
	s := Restore(testRank, LiveCursor(0), false, nil, Options{HasSource: true})
	ev := event.Stored(testRank, 0, nil, event.Block{BlockHash: 1, TokensHash: 1})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ev.EventID = uint64(i) + 1
		d := s.OnLive(&ev)
		if len(d.Apply) != 1 {
			b.Fatal("not applied")
		}
	}
}

// BenchmarkRecoveryCycle measures a gap of 8 with 8 events buffered, answered by Events.
func BenchmarkRecoveryCycle(b *testing.B) {
	s := Restore(testRank, LiveCursor(0), false, nil, Options{HasSource: true})
	live := make([]event.RouterEvent, 8)
	ans := Answer{Kind: AnswerEvents, Events: make([]event.RouterEvent, 8)}
	b.ReportAllocs()
	var base uint64
	for b.Loop() {
		for i := range ans.Events {
			ans.Events[i] = event.Stored(testRank, base+uint64(i)+1, nil)
		}
		ans.LastEventID = base + 8
		var tok uint64
		for i := range live {
			live[i] = event.Stored(testRank, base+9+uint64(i), nil)
			if d := s.OnLive(&live[i]); d.Fetch != nil {
				tok = d.Fetch.Token
			}
		}
		d := s.OnAnswer(tok, ans)
		if s.Cursor().Last != base+16 || d.Recovering {
			b.Fatalf("cursor %v", s.Cursor())
		}
		base += 16
	}
}
