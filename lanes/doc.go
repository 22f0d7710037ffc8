// Package lanes owns the write path of kvindex: decide → log → apply, per rank, in one order.
//
// N lane goroutines (default GOMAXPROCS). A rank is assigned to a lane the first time it is
// seen (round robin) and keeps that lane for the life of the Pipeline, so everything about a
// rank — its cursor, its log appends, its tree mutations, its snapshot — happens on one
// goroutine, in submission order. Different ranks on different lanes proceed in parallel; they
// share one Pebble commit pipeline, so concurrent synced commits share fsyncs.
//
// A lane drains whatever is queued (up to MaxBatchEvents) into one wal.Batch, commits it once,
// and only then (1) acknowledges the submitters and (2) applies the events to the index. Events
// are therefore always logged before they are applied, and acknowledged only once durable under
// the log's durability mode. If the commit fails, the cursor decisions of that batch are rolled
// back, nothing is applied, and every submitter in the batch gets the error.
//
// Cursor rules for pushed events (SPEC §5, live-only, no recovery source):
//
//	Cleared, id ≤ last            → ignored (stale)
//	Cleared, otherwise            → barrier: logged, applied, cursor = id, degraded cleared
//	id 0 or 1 after a higher id   → publisher restart: the rank's log is reset (synthetic clear),
//	                                the tree rank cleared, the event applied; a new epoch
//	id ≤ last otherwise           → stale, ignored and counted
//	id > last+1                   → gap: [last+1, id-1] recorded lost in the ledger, the rank reset
//	                                (log and tree), the event applied, the rank marked degraded
//	otherwise (or first sight)    → applied
//
// Queues are bounded (QueueDepth requests per lane): Submit blocks while the lane is full until
// its context ends, then returns ErrBusy. Flush is a FIFO barrier through every lane;
// RemoveWorker removes each rank on its own lane and barriers every lane before it returns;
// RemoveRank goes through the rank's lane. find_matches never goes through a lane: callers read
// the index directly.
//
// Invariants:
//   - per rank: cursor, log and tree change only on the rank's lane goroutine;
//   - a rank's tree state equals the replay of its snapshot + log (restart relies on it);
//   - the cursor written to the log in a batch describes exactly the events of that batch.
package lanes
