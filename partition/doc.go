// Package partition owns kvindex's partitions (docs/CONTRACT.md §9): a partition is (model_name,
// routing_group), default ("default", "default"), with its own state in every storage tier (a
// tier.Tiers: the device tree, an index.Index, and the lower-tier indexes), its own block size
// and its own ranks. The partition's id is part of every rank key on disk
// (event.Rank.Partition; store's key layout).
//
// # Invariants
//
//   - Ids are assigned once and never reused: 0 is the default partition; others count up from 1
//     in creation order. A partition's record is written (synced) before any event of it is.
//   - A partition's block size is fixed when it is created (by /register's block_size, or by the
//     first /v1 write with the server's --block-size); a later different size is refused
//     (ErrBlockSizeMismatch).
//   - A worker belongs to one partition (the engine's worker table says which; ErrWorkerElsewhere
//     and ElsewhereError are its refusal): the set only counts the workers placed in each
//     partition (Hold, Unhold), and never drops a partition that holds one.
//   - Reads never create a partition: Lookup answers ok=false for an unknown one.
//   - No read waits for an fsync: Ensure writes a new partition's record outside the lock every
//     Lookup and Get take (creations are serialized among themselves); the partition joins the
//     set once its record is durable. Drop takes the partition out of the set first and then
//     deletes its record under the same creations lock (a failed deletion puts it back); only
//     the default partition, which never leaves the set, is unrecorded under the lookup lock.
//   - A dropped id is never registered again: TiersOf gives a rank of a dropped partition an
//     empty state outside the set, never an unknown-<id> partition.
//
// # Record (global metadata 'K' | "partition/" | id as decimal)
//
//	{"model_name": "...", "routing_group": "...", "block_size": n}   (JSON, UTF-8)
//
// The default partition has a record once it was written to (block size fixed then); until then
// it exists in memory with the server's default block size.
package partition
