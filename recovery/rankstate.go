package recovery

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kvindex/kvindex/event"
)

// DefaultPendingCap is the number of live events a rank buffers while a recovery is in flight
// (docs/CONTRACT.md §5). When full, the oldest (lowest id) is dropped.
const DefaultPendingCap = 1024

// CursorKind is the shape of a rank's cursor (docs/CONTRACT.md §5).
type CursorKind uint8

// The cursor kinds.
const (
	// CursorInitial: nothing applied yet for the rank.
	CursorInitial CursorKind = iota
	// CursorLive: events up to and including Last are applied.
	CursorLive
)

// Cursor is where a rank's event stream stands.
type Cursor struct {
	Kind    CursorKind
	Last    uint64 // the last applied id, meaningful when HasLast
	HasLast bool   // false for CursorInitial
}

// LiveCursor is Cursor{Kind: CursorLive, Last: last, HasLast: true}.
func LiveCursor(last uint64) Cursor { return Cursor{Kind: CursorLive, Last: last, HasLast: true} }

func (c Cursor) String() string {
	switch c.Kind {
	case CursorInitial:
		return "initial"
	}
	return "live(" + strconv.FormatUint(c.Last, 10) + ")"
}

// IDRange is an inclusive range of event ids [First, Last].
type IDRange struct{ First, Last uint64 }

func (r IDRange) String() string {
	if r.First == r.Last {
		return strconv.FormatUint(r.First, 10)
	}
	return strconv.FormatUint(r.First, 10) + "-" + strconv.FormatUint(r.Last, 10)
}

// FetchRequest asks the driver to fetch a range from the rank's recovery source and to hand the
// answer back with OnAnswer(Token, answer). Full means "no start": a TreeDump (full restore).
type FetchRequest struct {
	Token uint64
	Start uint64 // the first id wanted (cursor+1); 0 and meaningless when Full
	Full  bool
}

// Dump is a TreeDump to install: the rank's whole state as Stored events in replay order, as of
// LastEventID.
type Dump struct {
	Events      []event.RouterEvent
	LastEventID uint64
}

// Options configure a Machine. The zero value is valid.
type Options struct {
	// HasSource: the rank's worker has a recovery source (a kvindex serving the range route).
	// Default false: gaps are recorded as lost and the rank is reset.
	HasSource bool
	// PendingCap bounds the live events buffered during a recovery. Default (0)
	// DefaultPendingCap (1,024); values below 1 mean the default.
	PendingCap int
	// TokenBase: fetch tokens are issued above it. A driver that replaces a rank's Machine
	// (removal, a failed commit) passes the old one's LastToken, so an answer to a fetch of the
	// old state can never match a fetch of the new one.
	TokenBase uint64
}

// Decision is what the driver must do after an input, in this order:
//
//  1. CancelFetch: abandon the fetch CancelToken (its answer would be discarded anyway).
//  2. Reset: drop the rank's state (its blocks in the tree, its log and snapshot).
//  3. Replace: replace the rank's state atomically with the dump (a TreeDump).
//  4. Apply: log and apply these events, in order.
//  5. Lost, Recovered: record these id ranges in the rank's gap ledger.
//  6. Fetch: start this fetch and later call OnAnswer with its token and answer.
//  7. Pending: make the rank's buffered events durable as Pending says (they were acknowledged).
//
// Slices in a Decision belong to the Machine and stay valid only until its next method call.
// The zero Decision asks for nothing. Every field asks for an action, except the counters
// (Ignored, Dropped) and the state flags (Degraded, Recovering), which report.
type Decision struct {
	CancelFetch bool
	CancelToken uint64
	Reset       bool
	// NewEpoch: the decision opens a new publisher epoch (a publisher restart). Reset is set and
	// Apply starts with the synthetic Cleared.
	NewEpoch  bool
	Replace   *Dump
	Apply     []event.RouterEvent
	Lost      []IDRange
	Recovered []IDRange
	// Ignored counts live events ignored as stale or duplicate (an id already applied, already
	// buffered, or delivered by the recovery answer that made it redundant).
	Ignored int
	// Dropped counts buffered events thrown away: the pending cap overflowed (the recovery in
	// flight fetches them again), a Cleared erased them, or a failed recovery left them inside
	// its lost range.
	Dropped int
	// Buffered: the live event was buffered until the recovery in flight ends. The driver must
	// make it durable (PendingFrom) before it acknowledges it.
	Buffered bool
	// Pending describes the buffered events after the decision, for the driver's durable copy:
	// PendingChanged says the set changed; PendingFrom is the lowest buffered id (every durable
	// pending event below it is gone from the set); PendingEmpty says none is left.
	PendingChanged bool
	PendingEmpty   bool
	PendingFrom    uint64
	// StaleAnswer: OnAnswer got an answer for a fetch that is no longer the rank's (cancelled by
	// a Cleared, a new epoch or a barrier, or superseded); it was discarded.
	StaleAnswer bool
	// Failure is why a recovery failed (wraps ErrTooNew, ErrInvalidRange, or the fetch error).
	Failure error
	Fetch   *FetchRequest
	// Degraded and Recovering describe the rank after the decision (see Machine.State).
	Degraded, Recovering bool
}

// String renders the actions in execution order, e.g.
// "apply[s16 s17]; recovered[12-15]; fetch#2(start=19)"; "-" when there is nothing to do.
func (d *Decision) String() string {
	var parts []string
	if d.StaleAnswer {
		parts = append(parts, "stale-answer")
	}
	if d.CancelFetch {
		parts = append(parts, fmt.Sprintf("cancel#%d", d.CancelToken))
	}
	if d.Reset {
		parts = append(parts, "reset")
	}
	if d.NewEpoch {
		parts = append(parts, "new-epoch")
	}
	if d.Replace != nil {
		parts = append(parts, fmt.Sprintf("replace(last=%d,events=%d)", d.Replace.LastEventID, len(d.Replace.Events)))
	}
	if len(d.Apply) > 0 {
		var b strings.Builder
		b.WriteString("apply[")
		for i := range d.Apply {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(kindLetter(d.Apply[i].Kind))
			b.WriteString(strconv.FormatUint(d.Apply[i].EventID, 10))
		}
		b.WriteByte(']')
		parts = append(parts, b.String())
	}
	if d.Buffered {
		parts = append(parts, "buffer")
	}
	if len(d.Lost) > 0 {
		parts = append(parts, "lost"+rangesString(d.Lost))
	}
	if len(d.Recovered) > 0 {
		parts = append(parts, "recovered"+rangesString(d.Recovered))
	}
	if d.Ignored > 0 {
		parts = append(parts, fmt.Sprintf("ignored=%d", d.Ignored))
	}
	if d.Dropped > 0 {
		parts = append(parts, fmt.Sprintf("dropped=%d", d.Dropped))
	}
	if d.Failure != nil {
		parts = append(parts, "failure("+d.Failure.Error()+")")
	}
	if d.Fetch != nil {
		if d.Fetch.Full {
			parts = append(parts, fmt.Sprintf("fetch#%d(full)", d.Fetch.Token))
		} else {
			parts = append(parts, fmt.Sprintf("fetch#%d(start=%d)", d.Fetch.Token, d.Fetch.Start))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

func kindLetter(k event.Kind) string {
	switch k {
	case event.KindStored:
		return "s"
	case event.KindRemoved:
		return "r"
	case event.KindCleared:
		return "c"
	}
	return "?"
}

func rangesString(rs []IDRange) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}

// trust says how far the rank's applied state can be believed.
type trust uint8

const (
	// trustExact: the state is the upstream's state as of the cursor.
	trustExact trust = iota
	// trustBehind: a recovery failed; the state is exact as of the cursor but events after it
	// were lost. A later successful recovery from the cursor repairs it.
	trustBehind
	// trustBroken: the rank was reset after an unrecoverable gap (or started mid-stream after a
	// failed restore); it misses blocks stored before. Only a Cleared or a TreeDump repairs it.
	trustBroken
)

// Machine is the recovery state machine of one rank (docs/CONTRACT.md §5): its cursor, the recovery in
// flight, the events buffered meanwhile, and whether its state can be trusted. It is pure: no I/O,
// no goroutines, no clock. It is not safe for concurrent use; the rank's lane owns it.
type Machine struct {
	rank       event.Rank
	hasSource  bool
	pendingCap int

	cursor Cursor
	trust  trust

	inflight  bool
	token     uint64 // token of the fetch in flight, when inflight
	lastToken uint64 // last token issued; tokens rise from 1

	// blocked: the last recovery from the current cursor failed. The next gap does not fetch
	// again (that could fail forever while the rank applies nothing) but takes the no-source
	// path; any cursor move clears it.
	blocked bool

	// lostTo: ids up to lostTo above the cursor are already in the loss ledger (hasLostTo), so
	// a later loss from the same cursor is not recorded twice.
	lostTo    uint64
	hasLostTo bool

	// pending are the live events buffered during a recovery: sorted by id, unique, every id >
	// the cursor, never a Cleared (a Cleared is a barrier and is applied at once).
	pending []event.RouterEvent

	apply []event.RouterEvent // scratch for Decision.Apply
}

// NewMachine returns the machine of a rank seen for the first time: cursor Initial.
func NewMachine(rank event.Rank, opts Options) *Machine {
	capacity := opts.PendingCap
	if capacity < 1 {
		capacity = DefaultPendingCap
	}
	return &Machine{rank: rank, hasSource: opts.HasSource, pendingCap: capacity, lastToken: opts.TokenBase}
}

// Restore returns the state of a rank rebuilt after a restart from its log: cursor is what the
// log says (normally LiveCursor(newest id), or Cursor{} when the rank logged nothing). degraded
// restores a rank that was degraded when the process stopped; it stays degraded until a Cleared
// or a full restore. pending are the durable buffered events of a recovery the restart
// interrupted (ids ≤ the cursor are dropped). Call Resume once the driver can fetch.
func Restore(rank event.Rank, cursor Cursor, degraded bool, pending []event.RouterEvent, opts Options) *Machine {
	s := NewMachine(rank, opts)
	if cursor.Kind == CursorLive && cursor.HasLast {
		s.cursor = cursor
	}
	if degraded {
		s.trust = trustBroken
	}
	for i := range pending {
		ev := pending[i]
		if ev.Kind == event.KindCleared || (s.cursor.HasLast && ev.EventID <= s.cursor.Last) {
			continue
		}
		var d Decision
		s.buffer(&d, &ev)
	}
	return s
}

// Resume continues a rank restored after a restart: with durable pending events it restarts
// their recovery (or, without a source, applies them after recording the gap lost); a degraded
// rank with a source starts a full restore. Otherwise it does nothing.
func (s *Machine) Resume() Decision {
	s.apply = s.apply[:0]
	var d Decision
	switch {
	case s.inflight:
	case len(s.pending) > 0 && s.hasSource:
		full := s.trust == trustBroken || !s.cursor.HasLast
		s.startFetch(&d, full, s.cursor.Last+1)
	case len(s.pending) > 0:
		s.fail(&d, ErrNoSource)
	case s.trust != trustExact && s.hasSource:
		s.startFetch(&d, true, 0)
	}
	return s.decide(d)
}

// Rank is the rank this state is for.
func (s *Machine) Rank() event.Rank { return s.rank }

// Cursor is where the rank's stream stands.
func (s *Machine) Cursor() Cursor { return s.cursor }

// Pending is the number of live events buffered.
func (s *Machine) Pending() int { return len(s.pending) }

// Recovering reports a recovery in flight.
func (s *Machine) Recovering() bool { return s.inflight }

// Degraded reports a rank whose state is known to miss events (a loss was recorded and not yet
// repaired).
func (s *Machine) Degraded() bool { return s.trust != trustExact }

// State is the rank's state as GET /v1/ranks shows it: "recovering" while a recovery is in
// flight, else "degraded" while a loss is unrepaired, else "live".
func (s *Machine) State() State {
	switch {
	case s.inflight:
		return StateRecovering
	case s.trust != trustExact:
		return StateDegraded
	}
	return StateLive
}

// State is a rank's condition as /v1/ranks, the metrics and the status page show it.
type State uint8

// The states. The zero value is live.
const (
	StateLive       State = iota // every event is applied exactly, no recovery in flight
	StateRecovering              // a recovery fetch is in flight; live events wait, durably
	StateDegraded                // a gap was recorded lost: the rank serves what it was told
)

// States lists every state in display order.
var States = []State{StateLive, StateRecovering, StateDegraded}

func (s State) String() string {
	switch s {
	case StateLive:
		return "live"
	case StateRecovering:
		return "recovering"
	case StateDegraded:
		return "degraded"
	}
	return "unknown"
}

// MarshalText writes the state's name (JSON answers carry it as a string).
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// LastToken is the last fetch token issued (Options.TokenBase when none was).
func (s *Machine) LastToken() uint64 { return s.lastToken }

// FetchToken is the token of the recovery in flight (0 when none).
func (s *Machine) FetchToken() uint64 {
	if !s.inflight {
		return 0
	}
	return s.token
}

// SetHasSource records whether the rank's worker has a recovery source, and acts at once (docs/CONTRACT.md §5
// lifecycle rule 3): setting it on a degraded rank with no recovery in flight starts a full
// restore (the Decision's Fetch); removing it while a recovery is in flight cancels the fetch
// and fails the recovery (loss recorded, buffered events applied after the gap).
func (s *Machine) SetHasSource(has bool) Decision {
	s.hasSource = has
	s.apply = s.apply[:0]
	if has {
		s.blocked = false
		if s.trust != trustExact && !s.inflight {
			return s.RequestRestore()
		}
		return s.decide(Decision{})
	}
	var d Decision
	if s.inflight {
		d.CancelFetch, d.CancelToken = true, s.token
		s.inflight = false
		s.fail(&d, ErrNoSource)
	}
	return s.decide(d)
}

// RequestRestore starts a full restore (a TreeDump) when the rank has a source and no recovery
// in flight; otherwise it does nothing. The driver may call it on a degraded rank at any time
// (after a restart, on an operator's request, on a timer).
func (s *Machine) RequestRestore() Decision {
	s.apply = s.apply[:0]
	var d Decision
	if s.hasSource && !s.inflight {
		s.startFetch(&d, true, 0)
	}
	return s.decide(d)
}

// OnLive decides what to do with one live event of the rank. The state keeps ev's slices while
// it is buffered: the caller must not reuse them.
func (s *Machine) OnLive(ev *event.RouterEvent) Decision {
	s.apply = s.apply[:0]
	var d Decision
	s.onLive(&d, ev)
	return s.decide(d)
}

func (s *Machine) onLive(d *Decision, ev *event.RouterEvent) {
	id := ev.EventID
	last, has := s.cursor.Last, s.cursor.HasLast
	switch {
	case has && id <= 1 && id < last:
		s.newEpoch(d, ev)
	case ev.Kind == event.KindCleared:
		if has && id <= last {
			d.Ignored++
		} else {
			s.barrier(d, ev)
		}
	case has && id <= last:
		d.Ignored++
	case s.inflight:
		s.buffer(d, ev)
	case s.cursor.Kind == CursorInitial:
		if s.hasSource && !s.blocked {
			s.buffer(d, ev)
			s.startFetch(d, true, 0)
			break
		}
		if s.blocked {
			// The restore failed: start from the middle of the stream, knowingly incomplete.
			s.trust = trustBroken
		}
		s.applyOne(ev)
	case id == last+1:
		s.applyOne(ev)
	case s.hasSource && !s.blocked:
		s.buffer(d, ev)
		s.startFetch(d, s.trust == trustBroken, last+1)
	default:
		s.recordLost(d, last+1, id-1)
		d.Reset = true
		s.trust = trustBroken
		s.applyOne(ev)
	}
}

// OnAnswer applies the answer of fetch token. An answer for another token than the one in
// flight is discarded (Decision.StaleAnswer): the rank was cleared, reset or restored since.
func (s *Machine) OnAnswer(token uint64, a Answer) Decision {
	s.apply = s.apply[:0]
	var d Decision
	if !s.inflight || token != s.token {
		d.StaleAnswer = true
		return s.decide(d)
	}
	s.inflight = false
	old := s.cursor
	switch a.Kind {
	case AnswerEvents:
		if !s.applyEvents(&d, a) {
			s.fail(&d, fmt.Errorf("%w: events answer from %d makes no progress", ErrBadAnswer, old.Last+1))
			return s.decide(d)
		}
	case AnswerTreeDump:
		d.Replace = &Dump{Events: a.Events, LastEventID: a.LastEventID}
		s.setCursor(LiveCursor(a.LastEventID))
		s.trust = trustExact
	default:
		s.fail(&d, a.failure())
		return s.decide(d)
	}
	if s.trust == trustBehind {
		s.trust = trustExact // the recovery started at the cursor the failure left behind
	}
	d.Recovered = s.recovered(old)
	s.drain(&d)
	return s.decide(d)
}

// decide fills the state flags, the Apply scratch and the pending summary.
func (s *Machine) decide(d Decision) Decision {
	if len(s.apply) > 0 {
		d.Apply = s.apply
	}
	if d.Buffered || d.Dropped > 0 || len(d.Apply) > 0 || d.Reset || d.Replace != nil || d.CancelFetch {
		d.PendingChanged = true
		d.PendingEmpty = len(s.pending) == 0
		if !d.PendingEmpty {
			d.PendingFrom = s.pending[0].EventID
		}
	}
	d.Degraded = s.trust != trustExact
	d.Recovering = s.inflight
	return d
}

func (s *Machine) setCursor(c Cursor) {
	if c != s.cursor {
		s.blocked = false
		if s.hasLostTo && (!c.HasLast || c.Last >= s.lostTo) {
			s.hasLostTo = false
		}
	}
	s.cursor = c
}

// recordLost adds [first, last] to the decision's losses, less what is already recorded.
func (s *Machine) recordLost(d *Decision, first, last uint64) {
	if s.hasLostTo && s.lostTo >= first {
		first = s.lostTo + 1
	}
	if first > last {
		return
	}
	d.Lost = append(d.Lost, IDRange{First: first, Last: last})
	s.lostTo, s.hasLostTo = last, true
}

func (s *Machine) applyOne(ev *event.RouterEvent) {
	s.apply = append(s.apply, *ev)
	s.setCursor(LiveCursor(ev.EventID))
}

// cancel abandons the recovery in flight and drops the pending events.
func (s *Machine) cancel(d *Decision) {
	if s.inflight {
		d.CancelFetch, d.CancelToken = true, s.token
		s.inflight = false
	}
	d.Dropped += len(s.pending)
	clear(s.pending)
	s.pending = s.pending[:0]
	s.hasLostTo = false
}

// barrier applies a live Cleared newer than the cursor. Buffered events below it are erased by
// it; any above it (delivered out of order) are taken again as live events after it.
func (s *Machine) barrier(d *Decision, ev *event.RouterEvent) {
	var after []event.RouterEvent
	for i := range s.pending {
		if s.pending[i].EventID > ev.EventID {
			after = append(after, s.pending[i])
		}
	}
	s.cancel(d)
	d.Dropped -= len(after)
	s.trust = trustExact
	s.applyOne(ev)
	for i := range after {
		s.onLive(d, &after[i])
	}
}

// newEpoch handles a publisher restart: reset, synthetic Cleared, then the event.
func (s *Machine) newEpoch(d *Decision, ev *event.RouterEvent) {
	s.cancel(d)
	d.Reset, d.NewEpoch = true, true
	if ev.Kind != event.KindCleared {
		s.apply = append(s.apply, event.Cleared(s.rank, ev.EventID))
	}
	s.trust = trustExact
	s.applyOne(ev)
}

// buffer adds ev to the pending events: in id order, duplicates ignored, the lowest id dropped
// when the cap overflows.
func (s *Machine) buffer(d *Decision, ev *event.RouterEvent) {
	i := sort.Search(len(s.pending), func(i int) bool { return s.pending[i].EventID >= ev.EventID })
	if i < len(s.pending) && s.pending[i].EventID == ev.EventID {
		d.Ignored++
		return
	}
	d.Buffered = true
	s.pending = append(s.pending, event.RouterEvent{})
	copy(s.pending[i+1:], s.pending[i:])
	s.pending[i] = *ev
	if len(s.pending) > s.pendingCap {
		n := len(s.pending) - s.pendingCap
		copy(s.pending, s.pending[n:])
		clear(s.pending[len(s.pending)-n:])
		s.pending = s.pending[:len(s.pending)-n]
		d.Dropped += n
	}
}

func (s *Machine) startFetch(d *Decision, full bool, start uint64) {
	s.lastToken++
	s.token = s.lastToken
	s.inflight = true
	if full {
		start = 0
	}
	d.Fetch = &FetchRequest{Token: s.token, Start: start, Full: full}
}

// fail records a failed recovery (docs/CONTRACT.md §5 lifecycle rule 1). Without buffered events the state
// is unchanged (exact up to the cursor). With buffered events — acknowledged, so they must not
// vanish — the gap up to the last contiguous run of them is recorded lost, the rank is reset
// (when it had state) and marked degraded, and that run is applied. Buffered events before the
// run lie inside the lost range: the reset would erase them anyway.
func (s *Machine) fail(d *Decision, err error) {
	d.Failure = err
	n := len(s.pending)
	if n == 0 {
		if s.trust == trustExact {
			s.trust = trustBehind
		}
		s.blocked = true
		return
	}
	run := n - 1
	for run > 0 && s.pending[run-1].EventID+1 == s.pending[run].EventID {
		run--
	}
	first := uint64(1)
	if s.cursor.HasLast {
		first = s.cursor.Last + 1
	}
	if runStart := s.pending[run].EventID; runStart > first {
		s.recordLost(d, first, runStart-1)
		d.Reset = s.cursor.HasLast
		s.trust = trustBroken
	}
	d.Dropped += run
	for i := run; i < n; i++ {
		s.applyOne(&s.pending[i])
	}
	clear(s.pending)
	s.pending = s.pending[:0]
	s.hasLostTo = false
	s.blocked = true
}

// applyEvents applies an Events answer. Events before the answer's last Cleared are skipped (the
// Cleared erases them). It stops at a hole (a server bug) and lets the drain fetch again; it
// reports false when the answer made no progress at all.
func (s *Machine) applyEvents(d *Decision, a Answer) bool {
	evs := a.Events
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == event.KindCleared {
			evs = evs[i:]
			break
		}
	}
	before := s.cursor
	hole := false
	for i := range evs {
		e := &evs[i]
		c := s.cursor
		if c.HasLast && e.EventID <= c.Last {
			continue
		}
		if e.Kind == event.KindCleared {
			s.trust = trustExact
		} else if c.HasLast && e.EventID != c.Last+1 {
			hole = true
			break
		}
		s.applyOne(e)
	}
	if !hole && (!s.cursor.HasLast || a.LastEventID > s.cursor.Last) {
		s.setCursor(LiveCursor(a.LastEventID))
	}
	return s.cursor != before || (!hole && len(s.pending) == 0)
}

// recovered returns the ids the answer filled: those in (old.Last, min(cursor, highest pending)]
// that were not buffered. Ids above the highest pending were never seen missing.
func (s *Machine) recovered(old Cursor) []IDRange {
	if !old.HasLast || len(s.pending) == 0 || s.cursor.Last <= old.Last {
		return nil
	}
	hi := min(s.cursor.Last, s.pending[len(s.pending)-1].EventID)
	var out []IDRange
	next := old.Last + 1
	for i := range s.pending {
		id := s.pending[i].EventID
		if id > hi {
			break
		}
		if id > next {
			out = append(out, IDRange{First: next, Last: id - 1})
		}
		next = id + 1
	}
	if next <= hi {
		out = append(out, IDRange{First: next, Last: hi})
	}
	return out
}

// drain applies the pending events the cursor now reaches and starts a follow-up recovery when
// a gap remains.
func (s *Machine) drain(d *Decision) {
	i := 0
	for ; i < len(s.pending); i++ {
		p := &s.pending[i]
		if p.EventID <= s.cursor.Last {
			d.Ignored++
			continue
		}
		if p.EventID != s.cursor.Last+1 {
			break
		}
		s.applyOne(p)
	}
	n := copy(s.pending, s.pending[i:])
	clear(s.pending[n:])
	s.pending = s.pending[:n]
	if n > 0 {
		s.startFetch(d, s.trust == trustBroken, s.cursor.Last+1)
	}
}

// failure is the error a non-success answer stands for.
func (a *Answer) failure() error {
	switch a.Kind {
	case AnswerTooNew:
		return fmt.Errorf("%w: requested %d, newest available %d", ErrTooNew, a.RequestedStart, a.NewestAvailable)
	case AnswerInvalidRange:
		return fmt.Errorf("%w: start %d, end %d", ErrInvalidRange, a.StartID, a.EndID)
	}
	if a.Err != nil {
		if errors.Is(a.Err, ErrFetchFailed) {
			return a.Err
		}
		return fmt.Errorf("%w: %w", ErrFetchFailed, a.Err)
	}
	return ErrFetchFailed
}
