package lanes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/wal"
)

// Sentinels.
var (
	// ErrBusy is returned by Submit (and the barriers) when a lane's queue stayed full until the
	// caller's context ended: the caller should retry later (HTTP 503).
	ErrBusy = errors.New("lanes: queue full")
	// ErrClosed is returned once Close has begun.
	ErrClosed = errors.New("lanes: closed")
)

// Options configure a Pipeline. Zero values take the documented defaults.
type Options struct {
	Lanes          int          // lane goroutines; default runtime.GOMAXPROCS(0)
	QueueDepth     int          // queued requests per lane before Submit waits; default 256
	MaxBatchEvents int          // events drained into one log commit; default 4096
	RetainEvents   uint64       // online retention: keep at least this many log events per rank; 0 keeps everything
	Logger         *slog.Logger // default slog.Default()
	Listener       Listener
	// Source returns the recovery source (base URL of a kvindex serving the range route) of a
	// worker, or "" for none. Default: no sources (gaps are recorded lost; SPEC §5).
	Source func(workerID uint64) string
	// Fetcher fetches ranges from sources; default recovery.NewFetcher with its defaults.
	Fetcher *recovery.Fetcher
}

// Listener holds optional callbacks, called on lane goroutines (keep them cheap). Metrics and tests
// use them.
type Listener struct {
	// Committed is called after each log commit with the events it carried and its latency.
	Committed func(lane, events int, d time.Duration, err error)
	// Ignored is called for every stale or duplicate event that was not logged.
	Ignored func(r event.Rank, id uint64)
	// GapLost is called when a gap without a source resets a rank.
	GapLost func(r event.Rank, from, to uint64)
	// Epoch is called when a publisher restart starts a new epoch for a rank.
	Epoch func(r event.Rank, lastID, newID uint64)
	// Skipped is called for a logged event that is not applied to the device tree (other tiers).
	Skipped func(r event.Rank, tier event.Tier)
	// Snapshot is called after online retention folded a rank's log prefix into a snapshot.
	Snapshot func(r event.Rank, upTo uint64, d time.Duration, err error)
	// Recovered is called for each gap a recovery filled.
	Recovered func(r event.Rank, from, to uint64)
	// Fetch is called when a recovery fetch ends (err nil on success).
	Fetch func(r event.Rank, full bool, d time.Duration, err error)
}

// Result counts what a Submit did.
type Result struct {
	Accepted int // events logged (and applied)
	Ignored  int // stale or duplicate ids, not logged
}

// RankStatus describes one rank for /v1/ranks.
type RankStatus struct {
	Rank      event.Rank
	Lane      int
	Last      uint64 // newest logged event id (0 with HasLast false when none)
	HasLast   bool
	Degraded  bool
	State     string // live, recovering or degraded
	Lost      uint64 // gaps recorded lost
	Recovered uint64 // gaps recorded recovered
}

type rankState struct {
	rank event.Rank
	lane int

	// st decides every live event and recovery answer; only the lane touches it.
	st     *recovery.RankState
	cancel context.CancelFunc // the recovery fetch in flight, if any; lane only

	mu        sync.Mutex // guards the fields below against readers of Status; written only by the lane
	last      uint64
	hasLast   bool
	degraded  bool
	state     string
	lost      uint64
	recovered uint64
	logged    uint64 // events logged since the last snapshot or reset (retention trigger)
	removed   bool
}

type opKind uint8

const (
	opEvents opKind = iota
	opBarrier
	opRemoveRank
	opDo
	opAnswer
)

type op struct {
	kind   opKind
	events []event.RouterEvent
	rank   event.Rank
	fn     func()
	w      *waiter // nil for internal ops (recovery answers)
	token  uint64
	answer recovery.Answer
	meta   []Meta // global metadata written in the same log batch as events
}

// Meta is a global metadata entry (wal.Batch.SetMeta) written atomically with a Submit's events.
type Meta struct {
	Name  string
	Value []byte
}

// waiter collects the outcome of one request across lanes.
type waiter struct {
	wg       sync.WaitGroup
	mu       sync.Mutex
	res      Result
	removed  int
	firstErr error
}

func (w *waiter) finish(res Result, removed int, err error) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.res.Accepted += res.Accepted
	w.res.Ignored += res.Ignored
	w.removed += removed
	if err != nil && w.firstErr == nil {
		w.firstErr = err
	}
	w.mu.Unlock()
	w.wg.Done()
}

// Pipeline is the set of lanes over one log and one index.
type Pipeline struct {
	opts Options
	log  *wal.Log
	ix   *index.Index
	lg   *slog.Logger

	mu     sync.RWMutex // guards ranks and next
	ranks  map[event.Rank]*rankState
	next   int
	lanes  []*lane
	closed atomic.Bool
	wg     sync.WaitGroup
	stop   chan struct{}

	fetchCtx    context.Context // cancelled by Close: ends every recovery fetch
	fetchCancel context.CancelFunc
	fetchWG     sync.WaitGroup
}

type lane struct {
	id       int
	p        *Pipeline
	q        chan *op
	inflight chan *pending // launched commits, in order, for the applier

	failMu   sync.Mutex
	failErr  error         // the first commit error: the lane refuses writes after it
	failed   []*batchState // failed batches whose ranks the decider must restore
	restored map[*rankState]bool
}

// New builds a pipeline; call Replay (optional) and then Start.
func New(log *wal.Log, ix *index.Index, opts Options) *Pipeline {
	if opts.Lanes <= 0 {
		opts.Lanes = runtime.GOMAXPROCS(0)
	}
	if opts.QueueDepth <= 0 {
		opts.QueueDepth = 256
	}
	if opts.MaxBatchEvents <= 0 {
		opts.MaxBatchEvents = 4096
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Fetcher == nil {
		opts.Fetcher = recovery.NewFetcher(recovery.FetcherOptions{Logger: opts.Logger})
	}
	p := &Pipeline{opts: opts, log: log, ix: ix, lg: opts.Logger, ranks: map[event.Rank]*rankState{}, stop: make(chan struct{})}
	p.fetchCtx, p.fetchCancel = context.WithCancel(context.Background())
	for i := range opts.Lanes {
		p.lanes = append(p.lanes, &lane{id: i, p: p, q: make(chan *op, opts.QueueDepth)})
	}
	return p
}

// Start launches the lane goroutines. Close stops them.
func (p *Pipeline) Start() {
	for _, ln := range p.lanes {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ln.run()
		}()
	}
}

// Close stops accepting requests, lets every lane finish what is queued, and waits for the lanes.
// It does not close the log or the index.
func (p *Pipeline) Close() {
	if p.closed.Swap(true) {
		return
	}
	p.fetchCancel() // fetches started from now on end at once
	close(p.stop)
	p.wg.Wait()
	p.fetchWG.Wait()
}

// Lanes returns the number of lanes.
func (p *Pipeline) Lanes() int { return len(p.lanes) }

// Failure returns the first commit error of the first lane that has one: such a lane refuses
// writes until the store is reopened. Nil while every lane accepts writes.
func (p *Pipeline) Failure() error {
	for _, ln := range p.lanes {
		if err := ln.failure(); err != nil {
			return err
		}
	}
	return nil
}

// QueueDepth returns the number of queued requests of each lane.
func (p *Pipeline) QueueDepth() []int {
	out := make([]int, len(p.lanes))
	for i, ln := range p.lanes {
		out[i] = len(ln.q)
	}
	return out
}

// state returns the rank's state, assigning it a lane (round robin) on first sight.
func (p *Pipeline) state(r event.Rank) *rankState {
	p.mu.RLock()
	rs := p.ranks[r]
	p.mu.RUnlock()
	if rs != nil {
		return rs
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if rs = p.ranks[r]; rs == nil {
		rs = &rankState{rank: r, lane: p.next % len(p.lanes), state: "live"}
		rs.st = p.stateMachine(rs)
		p.next++
		p.ranks[r] = rs
	}
	return rs
}

// stateMachine builds rs's recovery.RankState from its durable cursor (rs.last, rs.hasLast,
// rs.degraded): Live(last) when the rank has one, else Initial. Used on first sight, after a
// restart, a removal and a failed commit.
func (p *Pipeline) stateMachine(rs *rankState) *recovery.RankState {
	opts := recovery.Options{HasSource: p.hasSource(rs.rank.WorkerID)}
	if rs.hasLast {
		return recovery.Restore(rs.rank, recovery.LiveCursor(rs.last), rs.degraded, opts)
	}
	return recovery.NewRankState(rs.rank, opts)
}

func (p *Pipeline) hasSource(workerID uint64) bool {
	return p.opts.Source != nil && p.opts.Source(workerID) != ""
}

// SourceChanged tells every known rank of the worker (on its lane) whether it now has a
// recovery source; call it after the worker's source was set or removed.
func (p *Pipeline) SourceChanged(ctx context.Context, workerID uint64) error {
	has := p.hasSource(workerID)
	p.mu.RLock()
	var targets []*rankState
	for r, rs := range p.ranks {
		if r.WorkerID == workerID {
			targets = append(targets, rs)
		}
	}
	p.mu.RUnlock()
	for _, rs := range targets {
		if err := p.Do(ctx, rs.rank, func() { rs.st.SetHasSource(has) }); err != nil {
			return err
		}
	}
	return nil
}

// LaneOf returns the lane a rank is assigned to, assigning one on first sight.
func (p *Pipeline) LaneOf(r event.Rank) int { return p.state(r).lane }

func (p *Pipeline) enqueue(ctx context.Context, lane int, o *op) error {
	if p.closed.Load() {
		return ErrClosed
	}
	select {
	case p.lanes[lane].q <- o:
		return nil
	default:
	}
	select {
	case p.lanes[lane].q <- o:
		return nil
	case <-p.stop:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("%w: lane %d: %w", ErrBusy, lane, ctx.Err())
	}
}

// Submit logs and applies a validated batch of events; events of one rank keep their order.
// It returns once every accepted event is durable and applied. Events of ranks on different
// lanes are committed by different lanes: on a storage error some lanes' parts may be durable
// while the call returns the error (each lane's log and tree stay consistent).
func (p *Pipeline) Submit(ctx context.Context, evs []event.RouterEvent) (Result, error) {
	return p.SubmitWithMeta(ctx, evs)
}

// SubmitWithMeta is Submit that also writes global metadata entries in the same log batch as the
// events of every lane they touch (a source's read position, say, kept atomic with the events it
// delivered: when all events are of one rank the write is atomic with them).
func (p *Pipeline) SubmitWithMeta(ctx context.Context, evs []event.RouterEvent, meta ...Meta) (Result, error) {
	if len(evs) == 0 {
		return Result{}, nil
	}
	perLane := make([][]event.RouterEvent, len(p.lanes))
	var used []int
	for i := range evs {
		l := p.state(evs[i].Rank()).lane
		if perLane[l] == nil {
			used = append(used, l)
		}
		perLane[l] = append(perLane[l], evs[i])
	}
	w := &waiter{}
	w.wg.Add(len(used))
	for _, l := range used {
		if err := p.enqueue(ctx, l, &op{kind: opEvents, events: perLane[l], w: w, meta: meta}); err != nil {
			w.finish(Result{}, 0, err)
		}
	}
	w.wg.Wait()
	return w.res, w.firstErr
}

// Flush returns after every request queued before the call, on every lane, is done.
func (p *Pipeline) Flush(ctx context.Context) error {
	w := &waiter{}
	w.wg.Add(len(p.lanes))
	for i := range p.lanes {
		if err := p.enqueue(ctx, i, &op{kind: opBarrier, w: w}); err != nil {
			w.finish(Result{}, 0, err)
		}
	}
	w.wg.Wait()
	return w.firstErr
}

// Do runs fn on the rank's lane (with the rank's writer exclusion), e.g. to dump it.
func (p *Pipeline) Do(ctx context.Context, r event.Rank, fn func()) error {
	w := &waiter{}
	w.wg.Add(1)
	if err := p.enqueue(ctx, p.state(r).lane, &op{kind: opDo, rank: r, fn: fn, w: w}); err != nil {
		return err
	}
	w.wg.Wait()
	return w.firstErr
}

// RemoveRank durably removes one rank (log, snapshot, cursor, tree) through its lane.
func (p *Pipeline) RemoveRank(ctx context.Context, r event.Rank) (bool, error) {
	p.mu.RLock()
	rs := p.ranks[r]
	p.mu.RUnlock()
	if rs == nil {
		return false, nil
	}
	w := &waiter{}
	w.wg.Add(1)
	if err := p.enqueue(ctx, rs.lane, &op{kind: opRemoveRank, rank: r, w: w}); err != nil {
		return false, err
	}
	w.wg.Wait()
	return w.removed > 0, w.firstErr
}

// RemoveWorker removes every rank of a worker, each through its own lane, then barriers every
// lane before it returns.
func (p *Pipeline) RemoveWorker(ctx context.Context, workerID uint64) (int, error) {
	p.mu.RLock()
	var targets []*rankState
	for r, rs := range p.ranks {
		if r.WorkerID == workerID {
			targets = append(targets, rs)
		}
	}
	p.mu.RUnlock()
	w := &waiter{}
	w.wg.Add(len(targets))
	for _, rs := range targets {
		if err := p.enqueue(ctx, rs.lane, &op{kind: opRemoveRank, rank: rs.rank, w: w}); err != nil {
			w.finish(Result{}, 0, err)
		}
	}
	w.wg.Wait()
	if w.firstErr != nil {
		return w.removed, w.firstErr
	}
	return w.removed, p.Flush(ctx)
}

// Status lists every known rank, sorted.
func (p *Pipeline) Status() []RankStatus {
	p.mu.RLock()
	out := make([]RankStatus, 0, len(p.ranks))
	for _, rs := range p.ranks {
		rs.mu.Lock()
		if !rs.removed && (rs.hasLast || rs.logged > 0 || rs.state == "recovering") {
			out = append(out, RankStatus{Rank: rs.rank, Lane: rs.lane, Last: rs.last, HasLast: rs.hasLast,
				Degraded: rs.degraded, State: rs.state, Lost: rs.lost, Recovered: rs.recovered})
		}
		rs.mu.Unlock()
	}
	p.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Rank.Less(out[j].Rank) })
	return out
}

// RanksOfWorker lists the known ranks of a worker.
func (p *Pipeline) RanksOfWorker(workerID uint64) []event.Rank {
	var out []event.Rank
	for _, s := range p.Status() {
		if s.Rank.WorkerID == workerID {
			out = append(out, s.Rank)
		}
	}
	return out
}

// Replay rebuilds the index and every rank's cursor from the log (snapshots + log tails), ranks
// in parallel, one goroutine per lane, before Start. progress, if set, is called after each rank
// with the ranks done, the total and the events replayed so far.
func (p *Pipeline) Replay(ctx context.Context, progress func(done, total int, events uint64)) error {
	ranks, err := p.log.Ranks()
	if err != nil {
		return fmt.Errorf("lanes: listing ranks: %w", err)
	}
	// One rank table for every rank of the log, instead of one per rank as each is first seen.
	p.ix.RegisterRanks(ranks)
	perLane := make([][]*rankState, len(p.lanes))
	for _, r := range ranks {
		rs := p.state(r)
		perLane[rs.lane] = append(perLane[rs.lane], rs)
	}
	var (
		done   atomic.Int64
		events atomic.Uint64
		wg     sync.WaitGroup
		errMu  sync.Mutex
		first  error
	)
	for _, list := range perLane {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, rs := range list {
				if err := ctx.Err(); err != nil {
					errMu.Lock()
					if first == nil {
						first = fmt.Errorf("lanes: replay interrupted: %w", err)
					}
					errMu.Unlock()
					return
				}
				if err := p.replayRank(ctx, rs, &events); err != nil {
					errMu.Lock()
					if first == nil {
						first = err
					}
					errMu.Unlock()
					return
				}
				d := done.Add(1)
				if progress != nil {
					progress(int(d), len(ranks), events.Load())
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func (p *Pipeline) replayRank(ctx context.Context, rs *rankState, events *atomic.Uint64) error {
	meta, err := p.log.RankMeta(rs.rank)
	if err != nil {
		return fmt.Errorf("lanes: rank %v metadata: %w", rs.rank, err)
	}
	if meta.Removed {
		return nil
	}
	n, err := ReplayRank(ctx, p.log, p.ix, rs.rank, 0, p.lg)
	if err != nil {
		return fmt.Errorf("lanes: replaying rank %v: %w", rs.rank, err)
	}
	events.Add(uint64(n))
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if meta.HasCursor {
		rs.last, rs.hasLast, rs.degraded = meta.Cursor.LastEventID, true, meta.Cursor.Degraded
	} else if last, err := p.log.Last(rs.rank); err == nil && last > 0 {
		rs.last, rs.hasLast = last, true
	}
	rs.st = p.stateMachine(rs)
	rs.state = rs.st.State()
	for _, g := range meta.Gaps {
		switch g.Outcome {
		case wal.GapLost:
			rs.lost++
		case wal.GapRecovered:
			rs.recovered++
		}
	}
	if first, err := p.log.First(rs.rank); err == nil && first > 0 && rs.hasLast {
		rs.logged = rs.last - first + 1
	}
	return nil
}

// RankStatus returns one rank's status; ok is false for an unknown or removed rank. Called on the
// rank's lane (inside Do), it is consistent with the rank's log and tree.
func (p *Pipeline) RankStatus(r event.Rank) (RankStatus, bool) {
	p.mu.RLock()
	rs := p.ranks[r]
	p.mu.RUnlock()
	if rs == nil {
		return RankStatus{}, false
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.removed || !rs.hasLast {
		return RankStatus{}, false
	}
	return RankStatus{Rank: rs.rank, Lane: rs.lane, Last: rs.last, HasLast: rs.hasLast, Degraded: rs.degraded, State: rs.state, Lost: rs.lost, Recovered: rs.recovered}, true
}
