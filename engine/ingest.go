package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvindex/kvindex/approx"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// ErrInvalidEvent is returned by Ingest for an event of an unknown kind or tier; nothing of the
// batch is written.
var ErrInvalidEvent = errors.New("invalid event")

// PlaceError is a placement refusal naming the batch's first refused event (Index ≥ 0), or the
// batch as a whole (Index -1). It wraps partition.ErrWorkerElsewhere, ErrBlockSizeMismatch or
// ErrBadName.
type PlaceError struct {
	Index int
	Err   error
}

func (e *PlaceError) Error() string { return e.Err.Error() }
func (e *PlaceError) Unwrap() error { return e.Err }

// Placement is one door's placement of a worker's batch (Place).
type Placement struct {
	Door      Source        // the door's kind; empty: SourceLibrary
	Key       partition.Key // the partition
	BlockSize int           // 0: the partition's, or the engine's default for a new one
	Worker    uint64
	// EventSource: the door is an event source (ZMQ, NATS, a /register's ZMQ) whose setting of
	// the worker's indexed KV-cache group kinds (Kinds; 0: none, the partition's or the
	// server's) is applied with the placement, before any event of the batch is decided.
	EventSource bool
	Kinds       event.GroupKinds
}

// Place is the placement door, called by every door for every batch (no door keeps a worker's
// placement from one batch to the next: a removed worker is placed anew): it returns the id of
// p.Key's partition, creating it with p.BlockSize when needed, and places the worker there (its
// record, workers.go). A worker with ranks in another partition is refused
// (partition.ElsewhereError); an existing partition of another block size is refused when
// p.BlockSize > 0 (partition.ErrBlockSizeMismatch). The worker's door kind becomes p.Door, and
// an event source's group kinds its setting (p.Kinds), written in its record when they change;
// changed kinds rebuild the worker's ranks (lanes.Pipeline.Regroup), whose failure other than
// ctx's is logged and the batch goes on under the kinds in effect (such a failure is the
// store's, which the batch's submit meets too).
func (e *Engine) Place(ctx context.Context, p Placement) (uint32, error) {
	if p.Door == "" {
		p.Door = SourceLibrary
	}
	id, err := e.place1(ctx, p.Key, p.BlockSize, p.Worker)
	if err != nil {
		return 0, err
	}
	regroup, err := e.placeDoor(ctx, p)
	if err != nil {
		return 0, err
	}
	if regroup {
		e.lg.Info("indexed KV-cache group kinds of a source's worker", "worker_id", p.Worker, "kinds", p.Kinds.Names())
		if err := e.pipe.Regroup(ctx, p.Worker); err != nil {
			if ctx.Err() != nil {
				return 0, err
			}
			e.lg.Error("applying a source's indexed group kinds", "source", p.Door, "worker_id", p.Worker, "err", err)
		}
	}
	return id, nil
}

// refuseBeforeCreate refuses, before Ensure records key's partition, a batch whose worker
// (worker(i), i < n) belongs to a partition already: a refused batch writes nothing. It returns
// the refused worker's index. When key's partition is recorded, Ensure writes nothing and the
// claims after it refuse, so the common path costs one lookup a batch.
func (e *Engine) refuseBeforeCreate(key partition.Key, n int, worker func(int) uint64) (int, error) {
	if p, found := e.parts.Lookup(key); found && e.parts.Recorded(p.ID) {
		return -1, nil
	}
	for i := 0; i < n; i++ {
		if id, ok := e.partitionOf(worker(i)); ok {
			return i, e.elsewhere(worker(i), id)
		}
	}
	return -1, nil
}

func (e *Engine) place1(ctx context.Context, key partition.Key, blockSize int, worker uint64) (uint32, error) {
	evs := []event.RouterEvent{{WorkerID: worker}}
	if err := e.place(ctx, key, blockSize, evs); err != nil {
		if pe := (*PlaceError)(nil); errors.As(err, &pe) {
			return 0, pe.Err // one worker: no event index to name
		}
		return 0, err
	}
	return evs[0].Partition, nil
}

// place puts evs in key's partition (created when needed) and places their workers there. A
// worker of another partition fails the whole batch before anything is placed.
func (e *Engine) place(ctx context.Context, key partition.Key, blockSize int, evs []event.RouterEvent) error {
	for {
		err := e.placeOnce(ctx, key, blockSize, evs)
		if !errors.Is(err, partition.ErrDropped) {
			return err
		}
		// The partition was dropped between Ensure and the first claim (its last worker left):
		// none of the batch's workers was placed there (a placed worker keeps it); ensure it
		// anew, unless the caller gave up.
		if cerr := ctx.Err(); cerr != nil {
			return &PlaceError{Index: -1, Err: fmt.Errorf("placing the batch in %s: %w", key, cerr)}
		}
	}
}

func (e *Engine) placeOnce(ctx context.Context, key partition.Key, blockSize int, evs []event.RouterEvent) error {
	if i, err := e.refuseBeforeCreate(key, len(evs), func(i int) uint64 { return evs[i].WorkerID }); err != nil {
		return &PlaceError{Index: i, Err: err}
	}
	p, err := e.parts.Ensure(ctx, key, blockSize)
	if err != nil {
		return &PlaceError{Index: -1, Err: err}
	}
	for i := range evs {
		if i > 0 && evs[i].WorkerID == evs[i-1].WorkerID {
			continue // a run of one worker's events: looked up once
		}
		if id, ok := e.partitionOf(evs[i].WorkerID); ok && id != p.ID {
			return &PlaceError{Index: i, Err: e.elsewhere(evs[i].WorkerID, id)}
		}
	}
	for i := range evs {
		evs[i].Partition = p.ID
		if i > 0 && evs[i].WorkerID == evs[i-1].WorkerID {
			continue
		}
		if err := e.claim(evs[i].WorkerID, p.ID); err != nil {
			return &PlaceError{Index: i, Err: err}
		}
	}
	return nil
}

// Validate refuses an event of an unknown kind or tier (ErrInvalidEvent, naming its index).
func Validate(evs []event.RouterEvent) error {
	for i := range evs {
		if k := evs[i].Kind; k < event.KindStored || k > event.KindCleared || evs[i].Tier > event.TierExternal {
			return &PlaceError{Index: i, Err: fmt.Errorf("%w: event %d: kind %v, tier %v", ErrInvalidEvent, i, evs[i].Kind, evs[i].Tier)}
		}
	}
	return nil
}

// Ingest is the ingest door: it places the batch in key's partition and claims its workers
// (Place), then logs and applies it through the lanes (per rank in order, stale ids ignored,
// gaps recorded). It returns once every accepted event is durable and applied. A refusal
// (*PlaceError) writes nothing.
func (e *Engine) Ingest(ctx context.Context, key partition.Key, evs []event.RouterEvent) (Result, error) {
	return e.IngestSized(ctx, key, 0, evs)
}

// IngestSized is Ingest into a partition that, when it is created now, takes blockSize (0: the
// engine's default); an existing partition of another size refuses the batch.
func (e *Engine) IngestSized(ctx context.Context, key partition.Key, blockSize int, evs []event.RouterEvent) (Result, error) {
	return e.ingestFrom(ctx, SourceLibrary, key, blockSize, evs)
}

func (e *Engine) ingestFrom(ctx context.Context, src Source, key partition.Key, blockSize int, evs []event.RouterEvent) (Result, error) {
	ctx, release, err := e.Admit(ctx, len(evs), false)
	if err != nil {
		return Result{}, err
	}
	defer release()
	if err := Validate(evs); err != nil {
		return Result{}, err
	}
	if err := e.place(ctx, key, blockSize, evs); err != nil {
		return Result{}, err
	}
	// The records of workers new to this door go in the events' batch; every worker's record is
	// held for the submit, so that a removal in between refuses the batch (lockBatch).
	meta, done, err := e.lockDoors(ctx, evs, src)
	if err != nil {
		return Result{}, &PlaceError{Index: -1, Err: err}
	}
	res, err := e.pipe.SubmitWithMeta(ctx, evs, meta...)
	done(err == nil)
	return res, err
}

// Install replaces a placed rank's state with a peer's dump as of id last (a JetStream
// replica's bootstrap).
func (e *Engine) Install(ctx context.Context, r Rank, dump []event.RouterEvent, last uint64, meta ...Meta) error {
	return e.pipe.Install(ctx, r, dump, last, meta...)
}

// RecordDecision is the routing-decision door (approximate mode, docs/CONTRACT.md §8): the request's
// prefix — local hashes, and sequence hashes (nil: docs/CONTRACT.md §2's chain) — went to rank in key's
// partition. The rank is claimed for the partition (created when needed), then the decision is
// logged through the rank's lane and applied to the side index; it returns the blocks recorded
// and their deadline once durable. Decisions never move the rank's event cursor.
func (e *Engine) RecordDecision(ctx context.Context, key partition.Key, rank Rank, local, seq []uint64) (int, time.Time, error) {
	id, err := e.Place(ctx, Placement{Door: SourceDecisions, Key: key, Worker: rank.WorkerID})
	if err != nil {
		return 0, time.Time{}, &PlaceError{Index: -1, Err: err}
	}
	rank.Partition = id
	return e.approx.Record(ctx, approx.Decision{Rank: rank, LocalHashes: local, SeqHashes: seq})
}

// RecordDecisionTokens is RecordDecision by tokens, hashed with the partition's block size and
// the LoRA / namespace salt.
func (e *Engine) RecordDecisionTokens(ctx context.Context, key partition.Key, rank Rank, tokens []uint32, lora, namespace string) (int, time.Time, error) {
	id, err := e.Place(ctx, Placement{Door: SourceDecisions, Key: key, Worker: rank.WorkerID})
	if err != nil {
		return 0, time.Time{}, &PlaceError{Index: -1, Err: err}
	}
	rank.Partition = id
	local := event.BlockHashes(tokens, e.parts.Get(id).BlockSize, lora, namespace)
	return e.approx.Record(ctx, approx.Decision{Rank: rank, LocalHashes: local})
}

// WorkerPartition resolves the partition of a worker named by a route: with key given, key's
// partition if the worker is unknown or belongs to it (ok false when key names no partition or
// another partition than the worker's: the route answers as for an unknown rank); without, the
// worker's own partition, else the default.
func (e *Engine) WorkerPartition(worker uint64, key *partition.Key) (uint32, bool) {
	own, hasOwn := e.partitionOf(worker)
	if key != nil {
		p, ok := e.parts.Lookup(*key)
		if !ok || (hasOwn && own != p.ID) {
			return 0, false
		}
		return p.ID, true
	}
	if hasOwn {
		return own, true
	}
	return 0, true
}

// RemoveRankIn durably removes a worker's rank found as WorkerPartition finds it: with key
// given, only when the worker is of key's partition.
func (e *Engine) RemoveRankIn(ctx context.Context, rk Rank, key *partition.Key) (bool, error) {
	id, ok := e.WorkerPartition(rk.WorkerID, key)
	if !ok {
		return false, nil
	}
	rk.Partition = id
	return e.pipe.RemoveRank(ctx, rk)
}

// RemoveRank durably removes the rank rk names (its partition included).
func (e *Engine) RemoveRank(ctx context.Context, rk Rank) (bool, error) {
	return e.pipe.RemoveRank(ctx, rk)
}

// Flush returns once every event accepted before the call is applied and the side blocks due
// now are removed.
func (e *Engine) Flush(ctx context.Context) error {
	if err := e.pipe.Flush(ctx); err != nil {
		return err
	}
	return e.approx.Flush(ctx)
}

// Do runs fn on rk's lane (consistent with the rank's writes).
func (e *Engine) Do(ctx context.Context, rk Rank, fn func()) error { return e.pipe.Do(ctx, rk, fn) }

// Batch is one partition's share of a write that spans partitions (an NDJSON body with
// partition lines): its partition, the block size it is created with (0: the default), and its
// events.
type Batch struct {
	Key       partition.Key
	BlockSize int
	Events    []event.RouterEvent
	Source    Source // the door's kind (WorkerInfo.Door); "" is SourceLibrary
}

// IngestBatches ingests several partitions' batches as one write: every batch is validated and
// its placement checked against the partitions and claims as they are, and against the other
// batches (a worker in two of them), before anything is written (CheckBatches); then each batch
// goes through IngestSized (as its Source). A refusal names the event by its index across all
// batches.
func (e *Engine) IngestBatches(ctx context.Context, batches []Batch) (Result, error) {
	ctx, release, err := e.Admit(ctx, batchEvents(batches), false) // one share for the whole write
	if err != nil {
		return Result{}, err
	}
	defer release()
	if len(batches) == 1 { // one partition: ingestFrom checks it whole before writing
		return e.ingestFrom(ctx, batches[0].source(), batches[0].Key, batches[0].BlockSize, batches[0].Events)
	}
	if err := e.CheckBatches(batches); err != nil {
		return Result{}, err
	}
	var total Result
	offset := 0
	for _, b := range batches {
		res, err := e.ingestFrom(ctx, b.source(), b.Key, b.BlockSize, b.Events)
		total.Accepted += res.Accepted
		total.Ignored += res.Ignored
		if err != nil {
			return total, shifted(err, offset)
		}
		offset += len(b.Events)
	}
	return total, nil
}

// CheckBatches reports, without writing or waiting, what IngestBatches would refuse in batches
// as the partitions and workers stand now: an invalid event, a block size that is not its
// partition's, a worker placed in another partition or named in two batches' partitions (a
// *PlaceError; Index across all batches). A door passes it to AdmitChecked, so that a write that
// would be refused is answered so (409, 400) rather than after a wait for its share of the
// ingest bound or with 429; the ingest checks again under the workers' records.
func (e *Engine) CheckBatches(batches []Batch) error {
	claims := map[uint64]partition.Key{}
	offset := 0
	for _, b := range batches {
		if err := Validate(b.Events); err != nil {
			return shifted(err, offset)
		}
		if err := e.parts.CheckSize(b.Key, b.BlockSize); err != nil {
			return &PlaceError{Index: -1, Err: err}
		}
		p, exists := e.parts.Lookup(b.Key)
		last, seen := uint64(0), false
		for i := range b.Events {
			w := b.Events[i].WorkerID
			if seen && w == last {
				continue // a run of one worker's events is checked once
			}
			last, seen = w, true
			if k, ok := claims[w]; ok && k != b.Key {
				return &PlaceError{Index: offset + i, Err: fmt.Errorf("%w: worker %d is in partitions %s and %s of one write",
					partition.ErrWorkerElsewhere, w, k, b.Key)}
			}
			claims[w] = b.Key
			if own, ok := e.partitionOf(w); ok && (!exists || own != p.ID) {
				return &PlaceError{Index: offset + i, Err: e.elsewhere(w, own)}
			}
		}
		offset += len(b.Events)
	}
	return nil
}

// batchEvents is the events of every batch of a write.
func batchEvents(batches []Batch) int {
	n := 0
	for i := range batches {
		n += len(batches[i].Events)
	}
	return n
}

func (b *Batch) source() Source {
	if b.Source == "" {
		return SourceLibrary
	}
	return b.Source
}

// shifted moves a PlaceError's index by offset (an index within one batch of several).
func shifted(err error, offset int) error {
	var pe *PlaceError
	if errors.As(err, &pe) && pe.Index >= 0 {
		return &PlaceError{Index: pe.Index + offset, Err: pe.Err}
	}
	return err
}
