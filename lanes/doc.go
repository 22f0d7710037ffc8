// Package lanes owns the write path of kvindex: decide → log → apply, per rank, in one order.
//
// N lanes (default GOMAXPROCS). A rank is assigned to a lane the first time it is seen (round
// robin) and keeps that lane for the life of the Pipeline, so everything about a rank — its
// cursor, its log appends, its tree mutations, its snapshot — happens in submission order on that
// lane. Different ranks on different lanes proceed in parallel; all lanes share one Pebble commit
// pipeline, so concurrent synced commits share fsyncs.
//
// Each lane is two goroutines. The decider drains whatever is queued (up to MaxBatchEvents) into
// one wal.Batch with the cursor decisions of its events, and starts its commit without waiting;
// up to 8 commits per lane are in flight. The applier takes the launched batches in order, waits
// for each commit, then applies the batch to the index and acknowledges its submitters. Events
// are therefore always logged before they are applied, applied in log order, and acknowledged
// only once durable under the log's durability mode and applied. Ops that read or change a rank
// outside a batch (Do, removals, barriers, online retention) first drain the lane's pipeline.
//
// A failed commit applies nothing and fails its submitters; the log is unusable until the store
// is reopened (wal.ErrFailed), so the lane then refuses every write, and the touched ranks are
// rolled back to their last durable cursor.
//
// Every live event of a rank goes through the rank's recovery.RankState (SPEC §5), owned by the
// lane; its Decision is executed in order: cancel a fetch, reset the rank (log and tree), install
// a TreeDump (a snapshot in the same batch), log+apply events, record lost/recovered gaps in the
// ledger, start a fetch from the worker's recovery source. Without a source (Options.Source) a
// gap is recorded lost, the rank reset and marked degraded; a publisher restart (id 0 or 1 after
// a higher id) resets the rank and logs a synthetic Cleared; stale ids are ignored and counted.
// Fetches run on their own goroutines (owned by the Pipeline, ended by Close) and hand their
// answer back to the rank's lane. Live events buffered during a recovery count as accepted: their
// durability is the recovery source's until the recovery applies them.
//
// Queues are bounded (QueueDepth requests per lane): Submit blocks while the lane is full until
// its context ends, then returns ErrBusy. Flush is a FIFO barrier through every lane;
// RemoveWorker removes each rank on its own lane and barriers every lane before it returns;
// RemoveRank goes through the rank's lane. find_matches never goes through a lane: callers read
// the index directly.
//
// Invariants:
//   - per rank: cursor decisions are made only by the lane's decider, tree changes only by its
//     applier (or by the decider with the pipeline drained), in log order;
//   - a rank's tree state equals the replay of its snapshot + log (restart relies on it);
//   - the cursor written to the log in a batch describes exactly the events of that batch.
package lanes
