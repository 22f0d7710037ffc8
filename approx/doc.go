// Package approx owns approximate mode (docs/CONTRACT.md §8): for workers that publish no KV events, the
// router records where it sent each request (a routing decision) and kvindex assumes that rank
// now caches the request's prefix for a while (TTL).
//
// # What it owns
//
//   - A side index per partition: its own radix tree (index.Index) fed only by routing
//     decisions — router hashes never mix with the event-fed tree. find_matches answers each rank
//     with the max of its event-fed score and its side score (Merge).
//   - Each recorded (rank, block): its place in the prefix and its deadline, ordered by deadline
//     in a google/btree (earliest first; deepest block first on equal deadlines).
//   - Expiry: deadlines are rounded up to 100 ms buckets (TTL 0: exactly now); recording a block
//     again refreshes it. Drain removes what is due, one removal per rank through the rank's
//     lane; Flush drains what is due now (deterministic with an injected clock).
//   - The optional size bound: above MaxBlocks side entries in a partition, prune to
//     ⌊0.8·MaxBlocks⌋, earliest deadline first, deepest first on ties.
//   - Restart: the entries come back from the store (wal.ApproxEntries); those that expired
//     while the process was down are removed before the server is ready.
//
// # Invariants
//
//   - Every change goes through the rank's lane (lanes.Pipeline.Exec) and is durable (the
//     'A' records of package wal) before it is applied to the side tree or acknowledged.
//   - A decision stores its whole prefix from the root, so a block's deadline is never earlier
//     than any deeper block's of the same rank: expiry and pruning remove deepest-first within a
//     deadline, never strand a deeper block.
//   - Routing decisions never touch a rank's event log, cursor or ids.
//
// Where docs/CONTRACT.md §8 is silent: decisions are logged as their resulting state (one record per
// (rank, block) with its deadline, overwritten by a refresh, deleted by an expiry) instead of as
// synthetic Stored/Removed events with ids: replay needs the blocks and deadlines only, and the
// records cannot grow without bound under re-records. A decision's synthetic event is still
// counted, and Removed is applied to the side tree per rank and bucket, as Dynamo does.
package approx
