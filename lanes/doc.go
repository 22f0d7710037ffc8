// Package lanes owns the write path of kvindex: decide → log → apply, per rank, in one order.
//
// N lanes (default GOMAXPROCS). A rank is assigned to a lane the first time it is seen (round
// robin) and keeps that lane for the life of the Pipeline, so everything about a rank — its
// cursor, its log appends, its tree mutations, its snapshot — happens in submission order on that
// lane. Different ranks on different lanes proceed in parallel; all lanes share one Pebble commit
// pipeline, so concurrent synced commits share fsyncs.
//
// Each lane is two goroutines. The decider drains whatever is queued (up to MaxBatchEvents) into
// one wal.Batch with the cursor decisions of its events, and starts its commit itself
// (wal.Log.Start: into Pebble's memtable and WAL queue, without waiting for the sync), so the
// lane's batches land in Pebble in decision order — a later batch's cursor or reset never lands
// before an earlier one's; up to 8 commits per lane are in flight. The applier takes the launched
// batches in order, waits for each one's sync (wal.Log.Wait), then applies the batch to the index and acknowledges its submitters. Events
// are therefore always logged before they are applied, applied in log order, and acknowledged
// only once durable under the log's durability mode and applied. Ops that read or change a rank
// outside a batch (Do, removals, barriers, online retention) first drain the lane's pipeline.
//
// A failed commit applies nothing and fails its submitters; the log is unusable until the store
// is reopened (wal.ErrFailed), so the lane then refuses every write, and the touched ranks are
// rolled back to their last durable cursor.
//
// # Who owns a rank's lifecycle
//
// The rank's lifecycle (first sight → live ⇄ recovering → degraded → removed, across restarts;
// docs/CONTRACT.md §5 "Rank lifecycle") is split by kind of work, with one owner each:
//
//   - recovery.Machine decides (pure: no I/O, no clock): what to apply, buffer, fetch, reset,
//     record lost or recovered. recovery also owns how a rank is rebuilt from snapshot + log
//     (ReplayRank) and folded (Fold), and the wire shapes of range answers.
//   - lanes (this package) executes, and is the only executor: lane.decide feeds one input to a
//     rank's Machine — a live event, a recovery answer, a source change (opSource), the resume
//     after a restart (opResume) — and lane.execute carries out the whole Decision it returns,
//     in the batch the input belongs to. Nothing else calls a Machine. lanes also owns the rank
//     registry (which ranks exist, their lane, whether they are listed), removal, the restart
//     replay and online retention, and starts and cancels fetches.
//   - server only parses requests, serves the range rules and keeps the TreeDump cache, reading
//     a rank's state on its lane (Do) and keying cached dumps by RankStatus.Incarnation.
//
// Rules this package enforces (docs/CONTRACT.md §5; tests named TestLifecycle/ruleN_… and TestRuleN…):
//   - Buffered events are acknowledged only once durable: the batch that buffers a live event
//     writes it under the rank's pending keys (wal.Batch.AddPending), and the batch that applies
//     it or records it lost deletes it. A restart loads them back and Resume restarts their
//     recovery (or, without a source, applies them after recording the gap lost).
//   - A rank is listed from its first accepted event until removed, in every state.
//   - Reads never register a rank: Do, RankStatus and LaneOf answer ErrUnknownRank / false for
//     a rank that was never written or was removed; only Submit and the replay register.
//   - Removal (RemoveRank, RemoveWorker) cancels the fetch in flight and replaces the rank's
//     Machine, so a late answer finds no fetch with its token and is discarded.
//   - Every change that replaces a rank's state wholesale (reset, publisher restart, TreeDump
//     install, removal) gives it a new Incarnation.
//   - A damaged snapshot found by the replay is a recorded loss: the ids it covered go to the
//     ledger as lost and the rank restarts degraded.
//   - Close never hangs a caller: a Submit racing it returns ErrClosed or completes.
//
// Without a source (Options.Source) a gap is recorded lost, the rank reset and marked degraded; a
// publisher restart (id 0 or 1 after a higher id) resets the rank, logs a synthetic Cleared and
// counts an epoch (persisted in the cursor); stale ids are ignored and counted. Fetches run on
// their own goroutines (owned by the Pipeline, ended by Close) through Options.Fetcher and hand
// their answer back to the rank's lane.
//
// Queues are bounded (QueueDepth requests per lane): Submit blocks while the lane is full until
// its context ends, then returns ErrBusy. Flush is a FIFO barrier through every lane;
// RemoveWorker removes each rank on its own lane and barriers every lane before it returns;
// RemoveRank goes through the rank's lane. find_matches never goes through a lane: callers read
// the index directly.
//
// KV-cache groups of hybrid models (groups.go; the gate itself is package groupgate): the decider learns each rank's groups and logs
// events of kinds that are not indexed (Options.KindsOf for the rank — a source's or a
// partition's setting — else Options.IndexedKinds) without their blocks; the applier
// puts a per-rank group gate in front of the tree, which with two or more indexed groups keeps
// only the blocks every group holds. The restart replay, retention and checkpoints go through the
// same gate, and a rank's snapshot keeps each indexed group's blocks. A rank's setting is read
// wherever the log is applied (live, replay, Regroup), so a changed setting rebuilds the rank as
// a restart would; Regroup does it for a running worker, on each rank's lane, drained. An event
// of an indexed group without blocks (logged while its kind was not indexed) empties that group
// in the gate.
//
// The restart replay (Replay) rebuilds each rank's device events in bulk (replay_bulk.go): an
// index.RankBuilder takes its snapshot and log events and links the rank's final state into the
// tree once, instead of applying every store and removal of a never-compacted log; the first
// event it cannot take (a lower tier, a KV-cache group) hands the rank to the gate and the
// event-by-event apply, in log order. Either way the tree equals the event-by-event replay.
//
// Online checkpoints (Options.CheckpointRatio, checkpoint.go) run on the applier right after a
// batch is applied and acknowledged: a rank whose block operations since its last snapshot exceed
// the ratio × its live blocks gets a snapshot of its live tree at its newest applied id, the log
// untouched (wal.Log.WriteCheckpoint).
//
// The memory bound (Options.Evictor, evict.go): every few block operations the applier (and the
// restart replay) looks at how far the index is over its bound; the excess is split over the
// lanes by their ranks' device blocks, each lane evicting its share from its own ranks
// (index.EvictLeaves), the others' shares left as a debt they pay on their applier or, woken,
// on their decider with the pipeline drained. Evictions are not logged: with a bound, a rank's
// tree is the replay of its snapshot + log less some evicted blocks (an under-count), and a
// restart evicts again.
//
// Invariants:
//   - per rank: cursor decisions are made only by the lane's decider, tree changes only by its
//     applier (or by the decider with the pipeline drained), in log order;
//   - a checkpoint write is put in flight (on its own goroutine, one per lane) only while the
//     rank's incarnation is the one its applied steps were decided in (checked under rs.mu), and a
//     decision that resets or replaces a rank, and every pipeline drain (retention, removal,
//     installs, Close), waits for it first: it never lands after a later batch that reset or
//     replaced the rank;
//   - a rank's tree state equals the replay of its snapshot + log (restart relies on it);
//   - the cursor written to the log in a batch describes exactly the events of that batch.
package lanes
