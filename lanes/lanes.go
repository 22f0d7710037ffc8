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
	"github.com/kvindex/kvindex/groupgate"
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
	// ErrUnknownRank is returned by Do for a rank the pipeline does not know (never written, or
	// removed): reads never register a rank (docs/CONTRACT.md §5 lifecycle rule 5).
	ErrUnknownRank = errors.New("lanes: unknown rank")
)

// Tree is one partition's state as the lanes change it (tier.Tiers: the device tree and the
// lower tiers). Apply takes a logged event of any tier; the other methods act on every tier. The
// lanes call the writer methods of a rank only on its lane.
type Tree interface {
	Apply(ev *event.RouterEvent) index.Result
	ClearRank(r event.Rank)
	ReplaceRank(r event.Rank, dump []event.RouterEvent)
	RemoveRank(r event.Rank) bool
	Holds(r event.Rank) bool
	RegisterRanks(ranks []event.Rank)
}

// Trees gives the Tree of each partition (the engine passes its partition set's TiersOf).
type Trees func(partition uint32) Tree

// Single is Trees with one Tree for every partition (tests, single-partition tools).
func Single(t Tree) Trees { return func(uint32) Tree { return t } }

// ix is the state of r's partition.
func (p *Pipeline) ix(r event.Rank) Tree { return p.trees(r.Partition) }

// Fetcher fetches a range of a rank's events from a recovery source (recovery.Fetcher; tests
// pass a fake). start nil asks for a TreeDump.
type Fetcher interface {
	Fetch(ctx context.Context, baseURL string, r event.Rank, start *uint64, limit int) (recovery.Answer, error)
}

// Options configure a Pipeline. Zero values take the documented defaults.
type Options struct {
	Lanes          int    // lane goroutines; default runtime.GOMAXPROCS(0)
	QueueDepth     int    // queued requests per lane before Submit waits; default 256
	MaxBatchEvents int    // events drained into one log commit; default 4096
	RetainEvents   uint64 // online retention: keep at least this many log events per rank; 0 keeps everything
	// CheckpointRatio: a rank gets a new snapshot of its live state (an online checkpoint,
	// checkpoint.go) once the block operations applied since its last snapshot exceed this many
	// times its live blocks (and CheckpointMinBlocks); the log is not cut, so retention and range
	// answers are unchanged, and a restart replays only the log after the checkpoint. 0 is off.
	CheckpointRatio float64
	// CheckpointMinBlocks is the floor of the checkpoint trigger: a rank is checkpointed only
	// once it applied more than this many block operations since its last snapshot, so small or
	// empty ranks (a Cleared one) are not rewritten after every event. Default 256.
	CheckpointMinBlocks uint64
	Logger              *slog.Logger // default slog.Default()
	Listener            Listener
	// Source returns the recovery source (base URL of a kvindex serving the range route) of a
	// worker, or "" for none. Default: no sources (gaps are recorded lost; docs/CONTRACT.md §5).
	Source func(workerID uint64) string
	// Fetcher fetches ranges from sources; default recovery.NewFetcher with its defaults.
	Fetcher Fetcher
	// Now is the clock of the gap ledger's timestamps; default time.Now.
	Now func() time.Time
	// IndexedKinds are the KV-cache group kinds whose events change the tree (groups.go);
	// default (0) event.MainGroupKinds. Events without group metadata are always indexed.
	IndexedKinds event.GroupKinds
	// Evictor, when set, bounds the index's memory (evict.go); nil is unbounded.
	Evictor Evictor
	// KindsOf, when set, gives the indexed kinds of one rank (a source's or a partition's own
	// setting), 0 meaning IndexedKinds. Between a change and the Regroup of the rank's worker
	// the decider and the applier may each see either answer; the Regroup then rebuilds the
	// rank under the new one. A rebuild of the rank (restart replay, retention, Regroup) asks
	// once and keeps that answer to its end (kindsNow).
	KindsOf func(r event.Rank) event.GroupKinds
}

// Listener holds optional callbacks, called on lane goroutines (keep them cheap). Metrics and tests
// use them.
type Listener struct {
	// Committed is called after each log commit with the events it carried and its latency: from
	// its start on the decider until the applier, taking the lane's commits in order, saw it
	// durable.
	Committed func(lane, events int, d time.Duration, err error)
	// Ignored is called for every stale or duplicate event that was not logged.
	Ignored func(r event.Rank, id uint64)
	// GapLost is called when a gap without a source resets a rank.
	GapLost func(r event.Rank, from, to uint64)
	// Epoch is called when a publisher restart starts a new epoch for a rank.
	Epoch func(r event.Rank, lastID, newID uint64)
	// Snapshot is called after online retention folded a rank's log prefix into a snapshot.
	Snapshot func(r event.Rank, upTo uint64, d time.Duration, err error)
	// Checkpoint is called after an online checkpoint of a rank was written (err nil) or given
	// up (err says why) at event id lastID, with the snapshot's events and how long the dump
	// and write took; on the lane's applier or the goroutine of the write.
	Checkpoint func(r event.Rank, lastID uint64, events int, d time.Duration, err error)
	// Dropped is called with the buffered events a decision dropped: superseded by a recovery
	// answer (the cap overflowed), erased by a Cleared, or inside a lost range it recorded.
	// Never a loss of its own: the losses are the ledger's (GapLost).
	Dropped func(r event.Rank, n int)
	// Recovered is called for each gap a recovery filled.
	Recovered func(r event.Rank, from, to uint64)
	// GroupIgnored is called on the decider for each accepted event of a KV-cache group whose
	// kind is not indexed (logged without its blocks), with the blocks it named.
	GroupIgnored func(r event.Rank, kind event.GroupKind, blocks int)
	// Fetch is called on the rank's lane when a recovery fetch's answer was taken, with its
	// outcome: the answer's recovery.AnswerKind.Label ("events", "treedump", "too_new",
	// "invalid_range", "failed") or "discarded" (the fetch was cancelled, superseded or its rank
	// removed).
	Fetch func(r event.Rank, full bool, d time.Duration, outcome string)
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
	State     recovery.State
	Lost      uint64 // gaps recorded lost
	Recovered uint64 // gaps recorded recovered
	Pending   int    // live events buffered (durably) while a recovery is in flight
	Epoch     uint32 // publisher restarts seen
	// Incarnation changes whenever the rank's state is replaced wholesale (reset, publisher
	// restart, TreeDump install, removal): anything derived from one incarnation (a cached
	// TreeDump) is stale in another (docs/CONTRACT.md §5 lifecycle rule 8). Unique within the process.
	Incarnation uint64
	// Groups are the KV-cache groups the rank's events reported, by group_idx (none for a
	// stream without group metadata).
	Groups []GroupStatus
}

// laneRank is the lanes' bookkeeping for one rank: its recovery.Machine (the decisions) and what the
// executor made of them (the durable cursor, the ledger counters, the fetch in flight).
type laneRank struct {
	rank event.Rank
	lane int

	// st decides every live event and recovery answer; only the lane touches it, and only
	// through the executor (lane.decide).
	st     *recovery.Machine
	cancel context.CancelFunc // the recovery fetch in flight, if any; lane only

	mu sync.Mutex // guards the fields below against readers of Status; written only by the lane
	cursorState
	pending     int
	incarnation uint64

	// The applier's view, for online checkpoints (checkpoint.go); only the lane's applier (or the
	// decider with the pipeline drained, the replay before Start) touches them.
	applied    uint64 // id of the newest event applied to the tree
	appliedInc uint64 // the incarnation the newest applied step was decided in
	sinceSnap  uint64 // block operations applied since the rank's last snapshot (recovery.OpBlocks)

	// grp: the rank's KV-cache groups (groupgate.State: its table under its own lock, written
	// by the decider and the replay; its gate, the applier's as above).
	grp groupgate.State
}

// cursorState is what a lane commit changes of a rank beside its log: its cursor, ledger and
// listing. A batch saves it whole before its first decision on the rank and a failed commit puts
// it back whole (lane.restoreFailed), so a field added here is rolled back with the others.
type cursorState struct {
	last      uint64
	hasLast   bool
	degraded  bool
	state     recovery.State
	lost      uint64
	recovered uint64
	logged    uint64 // events logged since the last snapshot or reset (retention trigger)
	seen      bool   // an event was accepted since the rank was created or removed: it is listed
	removed   bool
	epoch     uint32
}

func (rs *laneRank) status() RankStatus {
	return RankStatus{Rank: rs.rank, Lane: rs.lane, Last: rs.last, HasLast: rs.hasLast, Degraded: rs.degraded,
		State: rs.state, Lost: rs.lost, Recovered: rs.recovered, Pending: rs.pending, Epoch: rs.epoch, Incarnation: rs.incarnation,
		Groups: rs.grp.Groups()}
}

// visible: listed in Status, answered by RankStatus (docs/CONTRACT.md §5 lifecycle rule 2).
func (rs *laneRank) visible() bool { return rs.seen && !rs.removed }

type opKind uint8

const (
	opEvents opKind = iota
	opBarrier
	opRemoveRank
	opDo
	opAnswer
	opSource  // the worker's recovery source was set or removed: SetHasSource
	opResume  // after the restart replay: Resume
	opExec    // a side write (approximate mode): its own batch, no Machine input
	opInstall // Install: a dump replaces the rank's state (install.go)
)

type op struct {
	kind   opKind
	events []event.RouterEvent
	rank   event.Rank
	fn     func()
	w      *waiter // nil for internal ops (recovery answers)
	token  uint64
	full   bool          // opAnswer: the fetch was a full restore
	took   time.Duration // opAnswer: how long the fetch ran
	answer recovery.Answer
	meta   []Meta // global metadata written in the same log batch as events
	exec   func(b *wal.Batch) func()
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
	opts  Options
	log   *wal.Log
	trees Trees
	lg    *slog.Logger

	evict evictShared // the memory bound (evict.go)

	mu    sync.RWMutex // guards ranks and next
	ranks map[event.Rank]*laneRank
	next  int
	lanes []*lane
	wg    sync.WaitGroup
	stop  chan struct{} // closed once no submitter can enqueue any more: the lanes drain and end

	// Closing never hangs a caller (docs/CONTRACT.md §5 lifecycle rule 9): a submitter holds sendMu (read)
	// from its closed check to the end of its send; Close sets closed and closes closing (which
	// wakes submitters blocked on a full queue), then takes sendMu (write) so every send has
	// finished before the lanes are told to drain.
	sendMu  sync.RWMutex
	closed  atomic.Bool
	closing chan struct{}

	incarnations atomic.Uint64

	fetchCtx    context.Context // cancelled by Close: ends every recovery fetch
	fetchCancel context.CancelFunc
	fetchWG     sync.WaitGroup
}

type lane struct {
	id       int
	p        *Pipeline
	q        chan *op
	inflight chan *pending    // launched commits, in order, for the applier
	free     chan *batchState // committed batch states for reuse: the applier returns, the decider takes

	failMu   sync.Mutex
	failErr  error         // the first commit error: the lane refuses writes after it
	failed   []*batchState // failed batches whose ranks the decider must restore
	restored map[*laneRank]bool
	// wake tells an idle decider that a failed batch waits for its ranks to be restored, so the
	// rollback to the durable cursors happens at once, not at the lane's next op (which, with
	// writes refused, may never come).
	wake chan struct{}

	enc      wal.SnapshotEncoder // the applier's checkpoint buffer (checkpoint.go)
	ckptMu   sync.Mutex
	ckptDone chan struct{} // closed when the lane's checkpoint write in flight returned; nil before the first

	ev evictState // the memory bound (evict.go)
}

// New builds a pipeline; call Replay (optional) and then Start.
func New(log *wal.Log, trees Trees, opts Options) *Pipeline {
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
	if opts.CheckpointMinBlocks == 0 {
		opts.CheckpointMinBlocks = defaultCheckpointMinBlocks
	}
	if opts.Fetcher == nil {
		opts.Fetcher = recovery.NewFetcher(recovery.FetcherOptions{Logger: opts.Logger})
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.IndexedKinds == 0 {
		opts.IndexedKinds = event.MainGroupKinds
	}
	p := &Pipeline{opts: opts, log: log, trees: trees, lg: opts.Logger, ranks: map[event.Rank]*laneRank{},
		stop: make(chan struct{}), closing: make(chan struct{})}
	p.fetchCtx, p.fetchCancel = context.WithCancel(context.Background())
	for i := range opts.Lanes {
		p.lanes = append(p.lanes, &lane{id: i, p: p, q: make(chan *op, opts.QueueDepth), wake: make(chan struct{}, 1),
			free: make(chan *batchState, pipelineDepth+1)})
	}
	return p
}

// Start launches the lane goroutines, then resumes every rank the replay left with work to do
// (durable pending events, or degraded with a source): Resume goes through the rank's lane like
// any input. Close stops them.
func (p *Pipeline) Start() {
	for _, ln := range p.lanes {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ln.run()
		}()
	}
	p.mu.RLock()
	var resume []*laneRank
	for _, rs := range p.ranks {
		rs.mu.Lock()
		if rs.visible() && (rs.pending > 0 || (rs.degraded && p.hasSource(rs.rank.WorkerID))) {
			resume = append(resume, rs)
		}
		rs.mu.Unlock()
	}
	p.mu.RUnlock()
	for _, rs := range resume {
		_ = p.enqueue(p.fetchCtx, rs.lane, &op{kind: opResume, rank: rs.rank})
	}
}

// Close stops accepting requests, lets every lane finish what is queued, and waits for the lanes.
// A submit racing with Close either completes or returns ErrClosed. It does not close the log or
// the index.
func (p *Pipeline) Close() {
	if p.closed.Swap(true) {
		return
	}
	close(p.closing)
	p.sendMu.Lock() // every enqueue that passed its closed check has sent or given up
	p.sendMu.Unlock()
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

// register returns the rank's state, assigning it a lane (round robin) on first sight. Only
// writes (Submit, the restart replay) register a rank.
func (p *Pipeline) register(r event.Rank) *laneRank {
	if rs := p.lookup(r); rs != nil {
		return rs
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rs := p.ranks[r]
	if rs == nil {
		rs = &laneRank{rank: r, lane: p.next % len(p.lanes), incarnation: p.incarnations.Add(1)}
		rs.st = p.stateMachine(rs, nil)
		p.next++
		p.ranks[r] = rs
	}
	return rs
}

// lookup returns the rank's state, or nil for a rank never registered. It creates nothing.
func (p *Pipeline) lookup(r event.Rank) *laneRank {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ranks[r]
}

// stateMachine builds rs's recovery.Machine from its durable state (rs.last, rs.hasLast,
// rs.degraded and the durable pending events): Live(last) when the rank has a cursor, else
// Initial. Used on first sight, after a restart, a removal and a failed commit.
func (p *Pipeline) stateMachine(rs *laneRank, pending []event.RouterEvent) *recovery.Machine {
	opts := recovery.Options{HasSource: p.hasSource(rs.rank.WorkerID)}
	if rs.st != nil {
		opts.TokenBase = rs.st.LastToken() // a late answer to the old state's fetch matches nothing
	}
	cur := recovery.Cursor{}
	if rs.hasLast {
		cur = recovery.LiveCursor(rs.last)
	}
	return recovery.Restore(rs.rank, cur, rs.degraded, pending, opts)
}

func (p *Pipeline) hasSource(workerID uint64) bool {
	return p.opts.Source != nil && p.opts.Source(workerID) != ""
}

// SourceChanged tells every known rank of the worker, on its lane, whether it now has a
// recovery source, and waits until each acted on it (docs/CONTRACT.md §5 lifecycle rule 3: a degraded rank
// starts its restore; a fetch towards a removed source is cancelled and its loss recorded).
// Call it after the worker's source was set or removed.
func (p *Pipeline) SourceChanged(ctx context.Context, workerID uint64) error {
	targets := p.ranksOf(workerID)
	w := &waiter{}
	w.wg.Add(len(targets))
	for _, rs := range targets {
		if err := p.enqueue(ctx, rs.lane, &op{kind: opSource, rank: rs.rank, w: w}); err != nil {
			w.finish(Result{}, 0, err)
		}
	}
	w.wg.Wait()
	return w.firstErr
}

// ranksOf returns the registered ranks of a worker (removed ones included).
func (p *Pipeline) ranksOf(workerID uint64) []*laneRank {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []*laneRank
	for r, rs := range p.ranks {
		if r.WorkerID == workerID {
			out = append(out, rs)
		}
	}
	return out
}

// LaneOf returns the lane of a registered rank; ok is false for an unknown one.
func (p *Pipeline) LaneOf(r event.Rank) (lane int, ok bool) {
	if rs := p.lookup(r); rs != nil {
		return rs.lane, true
	}
	return 0, false
}

func (p *Pipeline) enqueue(ctx context.Context, lane int, o *op) error {
	p.sendMu.RLock()
	defer p.sendMu.RUnlock()
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
	case <-p.closing:
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
		l := p.register(evs[i].Rank()).lane
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

// Do runs fn on the rank's lane (with the rank's writer exclusion), e.g. to dump it. A rank that
// was never written or was removed gets ErrUnknownRank and fn does not run: reads never register
// a rank (docs/CONTRACT.md §5 lifecycle rule 5). fn may still find the rank removed by an op queued before.
func (p *Pipeline) Do(ctx context.Context, r event.Rank, fn func()) error {
	rs := p.lookup(r)
	if rs == nil {
		return ErrUnknownRank
	}
	rs.mu.Lock()
	vis := rs.visible()
	rs.mu.Unlock()
	if !vis {
		return ErrUnknownRank
	}
	w := &waiter{}
	w.wg.Add(1)
	if err := p.enqueue(ctx, rs.lane, &op{kind: opDo, rank: r, fn: fn, w: w}); err != nil {
		return err
	}
	w.wg.Wait()
	return w.firstErr
}

// Exec runs a side write on the rank's lane, after everything queued before it on that lane:
// fn fills a log batch (approximate-mode entries: never the rank's log, cursor or ids) and
// returns what to apply once it committed (nil: nothing). It returns once the batch is durable
// and applied. The rank gets a lane (this is a write) but is neither listed nor given a cursor:
// its Machine is untouched (docs/CONTRACT.md §8: routing decisions never move the event cursor).
func (p *Pipeline) Exec(ctx context.Context, r event.Rank, fn func(b *wal.Batch) func()) error {
	w := &waiter{}
	w.wg.Add(1)
	if err := p.enqueue(ctx, p.register(r).lane, &op{kind: opExec, rank: r, exec: fn, w: w}); err != nil {
		return err
	}
	w.wg.Wait()
	return w.firstErr
}

// RemoveRank durably removes one rank (log, snapshot, cursor, pending, tree) through its lane; a
// recovery in flight is cancelled and its late answer discarded (docs/CONTRACT.md §5 lifecycle rule 4).
func (p *Pipeline) RemoveRank(ctx context.Context, r event.Rank) (bool, error) {
	rs := p.lookup(r)
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
	targets := p.ranksOf(workerID)
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
		if rs.visible() {
			out = append(out, rs.status())
		}
		rs.mu.Unlock()
	}
	p.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Rank.Less(out[j].Rank) })
	return out
}

// StateCounts counts the visible ranks (as Status lists them) of each partition by lifecycle
// state, indexed by recovery.State, without building each rank's status (a metrics scrape).
func (p *Pipeline) StateCounts() map[uint32][]int {
	out := map[uint32][]int{}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for r, rs := range p.ranks {
		rs.mu.Lock()
		visible, st := rs.visible(), rs.state
		rs.mu.Unlock()
		if !visible || int(st) >= len(recovery.States) {
			continue
		}
		c := out[r.Partition]
		if c == nil {
			c = make([]int, len(recovery.States))
			out[r.Partition] = c
		}
		c[st]++
	}
	return out
}

// RanksOfWorker lists the known ranks of a worker (those Status lists), in Status's order,
// without building any rank's status.
func (p *Pipeline) RanksOfWorker(workerID uint64) []event.Rank {
	var out []event.Rank
	p.mu.RLock()
	for r, rs := range p.ranks {
		if r.WorkerID != workerID {
			continue
		}
		rs.mu.Lock()
		visible := rs.visible()
		rs.mu.Unlock()
		if visible {
			out = append(out, r)
		}
	}
	p.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// replayRun is how many consecutive ranks a replay goroutine takes from the counter at a time.
const replayRun = 16

// Replay rebuilds the index and every rank's cursor from the log (snapshots + log tails), ranks
// in parallel on one goroutine per lane (each takes the next ranks; under a memory bound, its own
// lane's ranks), before Start. progress, if set, is called after each rank
// with the ranks done, the total and the events replayed so far.
func (p *Pipeline) Replay(ctx context.Context, progress func(done, total int, events uint64)) error {
	ranks, err := p.log.Ranks()
	if err != nil {
		return fmt.Errorf("lanes: listing ranks: %w", err)
	}
	// One rank table for every rank of the log, instead of one per rank as each is first seen.
	byPart := map[uint32][]event.Rank{}
	for _, r := range ranks {
		byPart[r.Partition] = append(byPart[r.Partition], r)
	}
	for part, rs := range byPart {
		p.trees(part).RegisterRanks(rs)
	}
	all := make([]*laneRank, len(ranks))
	for i, r := range ranks {
		all[i] = p.register(r)
	}
	// The lanes do not run yet and ranks replay independently, so the replay goroutines (one
	// per lane) take the next ranks in key order from one counter instead of each its lane's
	// share: none idles while another still has a long rank, or is descheduled, on 2 cores.
	// They take replayRun consecutive ranks at a time: a reader that walked to the end of a
	// rank is at the start of the next one, with no seek (wal.Reader).
	var (
		next   atomic.Int64
		done   atomic.Int64
		events atomic.Uint64
		wg     sync.WaitGroup
		errMu  sync.Mutex
		first  error
	)
	// Under a memory bound a lane's ranks replay on that lane's goroutine only, since a lane
	// evicts from all its ranks (evict.go): one writer per rank, as live.
	bounded := p.opts.Evictor != nil
	var perLane [][]*laneRank
	if bounded {
		perLane = make([][]*laneRank, len(p.lanes))
		for _, rs := range all {
			perLane[rs.lane] = append(perLane[rs.lane], rs)
		}
	}
	listed := newReplayBarrier(len(p.lanes))
	for li := range p.lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.lanes[li].replayIdle(listed) // evict.go: a lane done early still pays its share
			// One reader per goroutine: its ranks come in key order (from the counter, or its
			// lane's list, sorted as ranks are), so its iterators only seek forward.
			rd := p.log.NewReader()
			defer rd.Close()
			var run int64 // the first of the replayRun ranks taken from next
			for k := 0; ; k++ {
				var rs *laneRank
				if bounded {
					if k >= len(perLane[li]) {
						return
					}
					rs = perLane[li][k]
				} else {
					if k%replayRun == 0 {
						run = next.Add(replayRun) - replayRun
					}
					i := run + int64(k%replayRun)
					if i >= int64(len(all)) {
						return
					}
					rs = all[i]
				}
				if err := ctx.Err(); err != nil {
					errMu.Lock()
					if first == nil {
						first = fmt.Errorf("lanes: replay interrupted: %w", err)
					}
					errMu.Unlock()
					return
				}
				if err := p.replayRank(ctx, rd, rs, &events); err != nil {
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
	p.settleDebts()
	return first
}

// replayRank rebuilds rs from rd, which has read only ranks below it (its iterators seek forward).
func (p *Pipeline) replayRank(ctx context.Context, rd *wal.Reader, rs *laneRank, events *atomic.Uint64) error {
	r := rs.rank
	meta, err := rd.RankMeta(r)
	if err != nil {
		return fmt.Errorf("lanes: rank %v metadata: %w", r, err)
	}
	if meta.Removed {
		return nil
	}
	// The log's first id before the replay reads the log after the snapshot: both seek rd's
	// log iterator forward (First after the Range would seek it back).
	first, firstErr := rd.First(r)
	var rep recovery.Replayed
	if p.opts.Evictor != nil {
		// Under a memory bound, event by event through the lane's evicting tree (evict.go): the
		// bulk build would reach its final size before the bound is looked at.
		rep, err = recovery.ReplayRankFrom(ctx, rd, p.gated(rs, p.replayTree(rs)), r, 0)
	} else {
		bt := newBulkTree(p.gated(rs, p.ix(r)))
		rep, err = recovery.ReplayRankFrom(ctx, rd, bt, r, 0)
		bt.commit()
	}
	if err != nil {
		return fmt.Errorf("lanes: replaying rank %v: %w", r, err)
	}
	events.Add(uint64(rep.Events))
	pending, err := rd.Pending(r)
	if err != nil {
		return fmt.Errorf("lanes: rank %v pending events: %w", r, err)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if meta.HasCursor {
		rs.last, rs.hasLast, rs.degraded, rs.epoch = meta.Cursor.LastEventID, true, meta.Cursor.Degraded, meta.Cursor.Epoch
	} else if last, err := rd.Last(r); err == nil && last > 0 {
		rs.last, rs.hasLast = last, true
	}
	for _, g := range meta.Gaps {
		switch g.Outcome {
		case wal.GapLost:
			rs.lost++
		case wal.GapRecovered:
			rs.recovered++
		}
	}
	if rep.Damaged != nil {
		if err := p.recordDamagedSnapshot(ctx, rs, meta, rep.Damaged); err != nil {
			return err
		}
	}
	rs.applied, rs.appliedInc, rs.sinceSnap = rs.last, rs.incarnation, rep.LogBlocks
	rs.st = p.stateMachine(rs, pending)
	rs.state = rs.st.State()
	rs.pending = rs.st.Pending()
	rs.seen = rs.hasLast || rs.pending > 0 || len(meta.Gaps) > 0
	if firstErr == nil && first > 0 && rs.hasLast {
		rs.logged = rs.last - first + 1
	}
	return nil
}

// recordDamagedSnapshot makes a damaged snapshot a recorded loss (docs/CONTRACT.md §5 lifecycle rule 6): the
// ids it covered go to the ledger as lost, the rank is marked degraded (a later Cleared or full
// restore repairs it), and the snapshot is dropped, in one synced batch. Caller holds rs.mu.
func (p *Pipeline) recordDamagedSnapshot(ctx context.Context, rs *laneRank, meta wal.RankMeta, cause error) error {
	r := rs.rank
	// The ids below the log cut are gone; the log from the cut on was replayed without the
	// snapshot (ReplayRank). A damaged checkpoint over a log that was never cut loses nothing.
	covered, lost := uint64(0), false
	switch {
	case meta.Cut > 0:
		covered, lost = meta.Cut-1, true
	case meta.SnapshotID == 0:
		if first, err := p.log.First(r); err == nil && first > 0 {
			covered, lost = first-1, true
		}
	}
	if !lost {
		p.lg.Warn("snapshot is damaged; the log it was taken from is complete, so nothing is lost",
			"worker_id", r.WorkerID, "dp_rank", r.DPRank, "snapshot_id", meta.SnapshotID, "err", cause)
		if err := p.log.DropSnapshot(ctx, r); err != nil {
			return fmt.Errorf("lanes: dropping the damaged snapshot of rank %v: %w", r, err)
		}
		return nil
	}
	p.lg.Error("snapshot is damaged: the events it folded are lost; the rank is degraded",
		"worker_id", r.WorkerID, "dp_rank", r.DPRank, "lost_from", 0, "lost_to", covered, "err", cause)
	if err := p.log.DropSnapshot(ctx, r); err != nil {
		return fmt.Errorf("lanes: dropping the damaged snapshot of rank %v: %w", r, err)
	}
	b := p.log.NewBatch()
	defer b.Close()
	b.AddGap(r, wal.Gap{From: 0, To: covered, Outcome: wal.GapLost, At: p.opts.Now()})
	if !rs.hasLast {
		rs.last, rs.hasLast = covered, true
	}
	rs.degraded = true
	b.SetCursor(r, wal.Cursor{LastEventID: rs.last, Degraded: true, Epoch: rs.epoch})
	if err := p.log.Commit(ctx, b); err != nil {
		return fmt.Errorf("lanes: recording the damaged snapshot of rank %v: %w", r, err)
	}
	rs.lost++
	if f := p.opts.Listener.GapLost; f != nil {
		f(r, 0, covered)
	}
	return nil
}

// RankStatus returns one rank's status; ok is false for an unknown or removed rank. Called on the
// rank's lane (inside Do), it is consistent with the rank's log and tree.
func (p *Pipeline) RankStatus(r event.Rank) (RankStatus, bool) {
	rs := p.lookup(r)
	if rs == nil {
		return RankStatus{}, false
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if !rs.visible() {
		return RankStatus{}, false
	}
	return rs.status(), true
}
