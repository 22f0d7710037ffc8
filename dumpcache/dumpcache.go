package dumpcache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/wal"
	"github.com/zeebo/xxh3"
)

// Options configure the TreeDump cache of the range route (docs/CONTRACT.md §5 "Serving ranges").
// Zero values take the documented defaults.
type Options struct {
	// MaxCost bounds the encoded bytes of the cached TreeDump answers; default 256 MiB. Negative
	// disables the cache (builds are still single-flight).
	MaxCost int64
	// AppendBudget is how many log events (counted since the entry's last full build) may be
	// appended to a cached dump as a tail before it is rebuilt; default 4,096. Negative: never
	// extend, rebuild on every change.
	AppendBudget int
	// NumCounters sizes ristretto's admission counters (about 10× the ranks expected to be
	// cached); default 100,000.
	NumCounters int64
}

// Defaults of Options.
const (
	DefaultMaxCost      = 256 << 20
	DefaultAppendBudget = 4096
	DefaultNumCounters  = 100_000
)

func (o *Options) defaults() {
	if o.MaxCost == 0 {
		o.MaxCost = DefaultMaxCost
	}
	if o.AppendBudget == 0 {
		o.AppendBudget = DefaultAppendBudget
	}
	if o.NumCounters <= 0 {
		o.NumCounters = DefaultNumCounters
	}
}

// Sentinels.
var (
	// ErrClosed is returned by a TreeDump request after the cache was closed (the server is
	// shutting down).
	ErrClosed = errors.New("server: dump cache closed")
	// ErrUnknownRank is what Ranks.Do returns (wrapped or not) for a rank the lanes do not know.
	ErrUnknownRank = errors.New("dumpcache: unknown rank")
)

// Stamp is the part of a rank's status a cached dump is stamped with, to tell whether it is still
// valid (read on the rank's lane). Known is false for a rank with no logged id yet.
type Stamp struct {
	Known       bool
	Last        uint64
	Lost, Rec   uint64
	Degraded    bool
	Incarnation uint64
}

// Ranks is what the cache reads of the ranks it serves (the engine).
type Ranks interface {
	// Do runs fn on rk's lane, consistent with its writes; an unknown rank is ErrUnknownRank.
	Do(ctx context.Context, rk event.Rank, fn func()) error
	// State is rk's status (on its lane).
	State(rk event.Rank) Stamp
	// DumpRank dumps rk's state in every tier (on its lane).
	DumpRank(rk event.Rank, fn func(ev *event.RouterEvent) error) error
	// Range reads up to n events of rk's log from id from.
	Range(rk event.Rank, from uint64, n int, fn func(ev *event.RouterEvent) error) error
}

// Counters are the cache's counters since New.
type Counters struct{ Builds, Hits, Misses, Extensions, Shared uint64 }

// dumpEntry is one rank's encoded TreeDump answer, immutable once built (readers share it).
//
// buf is the whole HTTP body, the wire shape of recovery.AppendAnswerJSON plus a newline:
//
//	{"TreeDump":{"events":[ev0,ev1,…,evN-1],"last_event_id":L}}\n
//	                                      ^ bodyEnd (the ']' closing the events)
//
// Validity (checked on the rank's lane before the entry is served): the rank is the same
// incarnation (lanes.RankStatus.Incarnation: no reset, publisher restart, restore, removal or
// re-add since the build; docs/CONTRACT.md §5 lifecycle rule 8), its cursor is still last (or moved past it,
// for a tail), the lost/recovered gap counters and the degraded flag are unchanged, and the log
// still holds event last with the same content (fp = xxh3 of its log record).
type dumpEntry struct {
	rank        event.Rank
	incarnation uint64
	last        uint64
	lost, rec   uint64
	degraded    bool
	fp          uint64
	events      int // events in the dump (synthetic ids 0..events-1)
	appended    int // log events covered by tails since the last full build
	bodyEnd     int
	buf         []byte
}

// outcome says how a TreeDump request was served.
type outcome uint8

const (
	outcomeBuilt    outcome = iota // a full DumpRank
	outcomeHit                     // the cached entry, unchanged
	outcomeExtended                // the cached entry plus a Stored tail
	outcomeUncached                // unknown rank or an empty log: built, not cacheable
)

// flight is one TreeDump computation shared by the concurrent requests for a rank.
type flight struct {
	done chan struct{}
	e    *dumpEntry
	how  outcome
	err  error
}

// Cache owns the TreeDump cache (ristretto, keyed by rank) and the single-flight table. Its
// ristretto cache, and with it its goroutine, is created on first use and stopped by Close.
//
// Invariants: an entry in the cache came from a successful build or extension; a failed build
// deletes the rank's entry; at most one flight per rank runs at a time.
type Cache struct {
	ranks   Ranks
	timeout time.Duration // a flight's bound for getting onto the rank's lane
	lg      *slog.Logger

	mu      sync.Mutex // guards the fields below
	opts    Options
	started bool
	closed  bool
	c       *ristretto.Cache[string, *dumpEntry]
	flights map[event.Rank]*flight

	// testBuild, if set, runs on the lane before each full build; an error fails the build.
	testBuild func(event.Rank) error

	hits, misses, builds, extensions, shared atomic.Uint64
}

// New returns a cache of ranks' TreeDumps with options o; a flight waits at most timeout to get
// onto a rank's lane.
func New(ranks Ranks, o Options, timeout time.Duration, lg *slog.Logger) *Cache {
	if lg == nil {
		lg = slog.Default()
	}
	return &Cache{ranks: ranks, timeout: timeout, lg: lg, opts: o}
}

// SetTestBuild installs a hook run on the lane before each full build; an error fails the build
// (tests of the single flight and of failed builds).
func (d *Cache) SetTestBuild(f func(event.Rank) error) { d.testBuild = f }

// Counters reads the cache's counters.
func (d *Cache) Counters() Counters {
	return Counters{Builds: d.builds.Load(), Hits: d.hits.Load(), Misses: d.misses.Load(), Extensions: d.extensions.Load(), Shared: d.shared.Load()}
}

// Bytes is the cache's bytes held now and its bound.
func (d *Cache) Bytes() (used, limit uint64) { return d.usedBytes(), d.maxBytes() }

// cache returns the ristretto cache (nil when disabled), creating it on first use.
func (d *Cache) cache() (*ristretto.Cache[string, *dumpEntry], error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if !d.started {
		d.started = true
		d.opts.defaults()
		d.flights = map[event.Rank]*flight{}
		if d.opts.MaxCost > 0 {
			c, err := ristretto.NewCache(&ristretto.Config[string, *dumpEntry]{
				NumCounters:        d.opts.NumCounters,
				MaxCost:            d.opts.MaxCost,
				BufferItems:        64,
				IgnoreInternalCost: true,
			})
			if err != nil {
				return nil, fmt.Errorf("server: creating the dump cache: %w", err)
			}
			d.c = c
		}
	}
	return d.c, nil
}

// Close stops the ristretto goroutine; later requests get ErrClosed.
func (d *Cache) Close() {
	d.mu.Lock()
	c := d.c
	d.closed, d.c = true, nil
	d.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

func cacheKey(r event.Rank) string {
	var k [16]byte
	binary.BigEndian.PutUint32(k[:4], r.Partition)
	binary.BigEndian.PutUint64(k[4:12], r.WorkerID)
	binary.BigEndian.PutUint32(k[12:], r.DPRank)
	return string(k[:])
}

// put stores e, waiting for ristretto's buffers and retrying a dropped Set (docs/CONTRACT.md §15: Set is
// best effort). It gives up after a few tries: the next request rebuilds.
func put(c *ristretto.Cache[string, *dumpEntry], e *dumpEntry) {
	k := cacheKey(e.rank)
	for range 4 {
		ok := c.Set(k, e, int64(len(e.buf)))
		c.Wait()
		if ok {
			return
		}
	}
}

// TreeDump returns rk's TreeDump answer (the whole body), single-flight: a request for a rank with
// a flight in progress waits for that flight's answer instead of starting its own.
func (d *Cache) TreeDump(ctx context.Context, rk event.Rank) ([]byte, error) {
	c, err := d.cache()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if f, ok := d.flights[rk]; ok {
		d.mu.Unlock()
		d.shared.Add(1)
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err == nil {
			d.count(f.how)
			return f.e.buf, nil
		}
		return nil, f.err
	}
	f := &flight{done: make(chan struct{})}
	d.flights[rk] = f
	d.mu.Unlock()

	// The flight outlives its first requester's cancellation (others may wait on it), bounded
	// by the submit timeout for getting onto the lane.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.timeout)
	func() {
		// A panicking build must still end the flight: its followers would wait forever.
		defer func() {
			if p := recover(); p != nil {
				f.err = fmt.Errorf("server: building the TreeDump of rank %v panicked: %v", rk, p)
				d.lg.Error("TreeDump build panicked", "worker_id", rk.WorkerID, "dp_rank", rk.DPRank, "panic", fmt.Sprint(p))
			}
		}()
		f.e, f.how, f.err = d.flight(fctx, c, rk)
	}()
	cancel()
	if c != nil {
		switch {
		case f.err != nil || f.how == outcomeUncached:
			c.Del(cacheKey(rk))
			c.Wait()
		case f.how != outcomeHit:
			put(c, f.e)
		}
	}
	d.mu.Lock()
	delete(d.flights, rk)
	d.mu.Unlock()
	close(f.done)
	if f.err != nil {
		return nil, f.err
	}
	d.count(f.how)
	return f.e.buf, nil
}

func (d *Cache) count(how outcome) {
	switch how {
	case outcomeHit, outcomeExtended:
		d.hits.Add(1)
	default:
		d.misses.Add(1)
	}
}

// dumpFlight computes rk's answer: the cached entry if still valid, the entry plus a Stored tail
// when that is safe, else a full build. Everything that decides is read on the rank's lane;
// encoding happens after, off the lane.
func (d *Cache) flight(ctx context.Context, c *ristretto.Cache[string, *dumpEntry], rk event.Rank) (*dumpEntry, outcome, error) {
	var cached *dumpEntry
	if c != nil {
		cached, _ = c.Get(cacheKey(rk))
	}
	var (
		st      Stamp
		how     outcome
		dumped  []event.RouterEvent // full build
		tail    []event.RouterEvent // extension
		fp      uint64
		hasFP   bool
		covered int
		err     error
	)
	derr := d.ranks.Do(ctx, rk, func() {
		st = d.ranks.State(rk)
		if cached != nil && st.Known && cached.incarnation == st.Incarnation && cached.last <= st.Last && cached.lost == st.Lost &&
			cached.rec == st.Rec && cached.degraded == st.Degraded {
			var ok bool
			tail, fp, ok, err = d.readTail(rk, cached, st.Last, d.appendBudget())
			if err != nil {
				return
			}
			if ok {
				how, covered, hasFP = outcomeExtended, int(st.Last-cached.last), true
				if st.Last == cached.last {
					how = outcomeHit
				}
				return
			}
		}
		how = outcomeBuilt
		if d.testBuild != nil {
			if err = d.testBuild(rk); err != nil {
				return
			}
		}
		err = d.ranks.DumpRank(rk, func(ev *event.RouterEvent) error {
			dumped = append(dumped, ev.Clone())
			return nil
		})
		if err != nil || !st.Known {
			return
		}
		fp, hasFP, err = d.fingerprint(rk, st.Last)
	})
	if errors.Is(derr, ErrUnknownRank) {
		// Never written, or removed: an empty dump, built without registering the rank (docs/CONTRACT.md §5
		// lifecycle rule 5) and never cached.
		st, how, dumped, derr = Stamp{}, outcomeBuilt, nil, nil
	}
	if derr != nil {
		err = derr
	}
	if err != nil {
		return nil, 0, fmt.Errorf("tree dump of rank %v: %w", rk, err)
	}
	switch how {
	case outcomeHit:
		return cached, how, nil
	case outcomeExtended:
		d.extensions.Add(1)
		return cached.extend(tail, st.Last, fp, covered), how, nil
	}
	d.builds.Add(1)
	e, err := newDumpEntry(rk, dumped, st, fp)
	if err != nil {
		return nil, 0, err
	}
	if !st.Known || !hasFP {
		how = outcomeUncached
	}
	return e, how, nil
}

func (d *Cache) appendBudget() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.opts.AppendBudget
}

// errTailUnsafe stops a tail read that found something a Stored tail cannot express.
var errTailUnsafe = errors.New("tail cannot extend the dump")

// readTail reads rk's log from e.last to newest and returns the Stored events (of any tier) after
// e.last, when appending them to e's dump replays to the rank's state; ok is false otherwise.
//
// Decision (docs/CONTRACT.md §5 "extended with a safe tail"): only Stored tails extend a dump. A TreeDump is
// applied with ReplaceRank (tier.Tiers), which applies Stored events, each to its tier, and
// ignores every other kind, so a Removed in the tail cannot be expressed (and the device dump
// leaves blocks stranded by a mid-chain Removed out, which a raw Removed could not reproduce): a
// Removed of any tier or any Cleared forces a full rebuild, as do an id gap, a log that no longer
// holds e.last with the same record (folded, reset, rewritten) and a tail longer than the budget.
// A device Stored event whose parent the dump does not hold (a block stranded under a removed
// ancestor) is skipped by the consumer as it would be left out of a fresh dump, so the extended
// dump scores like a fresh one; a lower-tier Stored applies as it did here (continuation edges
// need no parent).
func (d *Cache) readTail(rk event.Rank, e *dumpEntry, newest uint64, budget int) (tail []event.RouterEvent, fp uint64, ok bool, err error) {
	if newest-e.last > uint64(max(budget-e.appended, 0)) {
		return nil, 0, false, nil
	}
	want := e.last
	var scratch []byte
	err = d.ranks.Range(rk, e.last, int(newest-e.last)+1, func(ev *event.RouterEvent) error {
		if ev.EventID != want {
			return errTailUnsafe
		}
		want++
		scratch = wal.EncodeRecord(scratch[:0], ev)
		fp = xxh3.Hash(scratch)
		if ev.EventID == e.last {
			if fp != e.fp {
				return errTailUnsafe
			}
			return nil
		}
		if ev.Kind != event.KindStored {
			return errTailUnsafe
		}
		tail = append(tail, ev.Clone())
		return nil
	})
	if errors.Is(err, errTailUnsafe) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	return tail, fp, want == newest+1, nil
}

// fingerprint returns the xxh3 of rk's log record with id `id`; ok is false when the log does not
// hold it (an empty log after a restore or a fold), which makes the dump uncacheable.
func (d *Cache) fingerprint(rk event.Rank, id uint64) (fp uint64, ok bool, err error) {
	err = d.ranks.Range(rk, id, 1, func(ev *event.RouterEvent) error {
		if ev.EventID == id {
			fp, ok = xxh3.Hash(wal.EncodeRecord(nil, ev)), true
		}
		return nil
	})
	return fp, ok, err
}

func newDumpEntry(rk event.Rank, evs []event.RouterEvent, st Stamp, fp uint64) (*dumpEntry, error) {
	e := &dumpEntry{rank: rk, incarnation: st.Incarnation, last: st.Last, lost: st.Lost, rec: st.Rec, degraded: st.Degraded, fp: fp, events: len(evs)}
	size := 64
	for i := range evs {
		size += 96 + 64*len(evs[i].Blocks)
	}
	buf, err := recovery.AppendAnswerJSON(make([]byte, 0, size), &recovery.Answer{Kind: recovery.AnswerTreeDump, Events: evs, LastEventID: st.Last})
	if err != nil {
		return nil, err
	}
	e.bodyEnd = len(buf) - len(treeDumpSuffix(nil, st.Last))
	e.buf = append(buf, '\n')
	return e, nil
}

// treeDumpSuffix appends what follows the events of a TreeDump answer (recovery's wire shape).
func treeDumpSuffix(dst []byte, last uint64) []byte {
	dst = append(dst, `],"last_event_id":`...)
	dst = strconv.AppendUint(dst, last, 10)
	return append(dst, "}}"...)
}

// extend returns a new entry: e's events, then tail renumbered to continue the dump's synthetic
// ids, as of newest. e is not modified (other requests may be writing it out).
func (e *dumpEntry) extend(tail []event.RouterEvent, newest, fp uint64, covered int) *dumpEntry {
	n := *e
	n.last, n.fp, n.appended = newest, fp, e.appended+covered
	size := e.bodyEnd + 64
	for i := range tail {
		size += 96 + 64*len(tail[i].Blocks)
	}
	buf := append(make([]byte, 0, size), e.buf[:e.bodyEnd]...)
	for i := range tail {
		if n.events > 0 {
			buf = append(buf, ',')
		}
		tail[i].EventID = uint64(n.events)
		buf = event.AppendJSON(buf, &tail[i])
		n.events++
	}
	n.bodyEnd = len(buf)
	buf = treeDumpSuffix(buf, newest)
	n.buf = append(buf, '\n')
	return &n
}

// usedBytes is the cost ristretto holds (the encoded answers' lengths); 0 before first use or
// when disabled.
func (d *Cache) usedBytes() uint64 {
	d.mu.Lock()
	c := d.c
	d.mu.Unlock()
	if c == nil {
		return 0
	}
	return uint64(max(c.MaxCost()-c.RemainingCost(), 0))
}

// maxBytes is the cache's configured max cost (0 when disabled).
func (d *Cache) maxBytes() uint64 {
	d.mu.Lock()
	o := d.opts
	d.mu.Unlock()
	o.defaults()
	return uint64(max(o.MaxCost, 0))
}
