// Package worker is the durable form of what kvindex knows about one worker (docs/CONTRACT.md
// §14, "A worker is one record"): its partition, the kind of door its events come through, its
// recovery URL, the KV-cache group kinds its event source indexes, its lease and its Dynamo
// registrations, as one global metadata record per worker. The engine's worker table (engine/
// workers.go) owns the records at run time; the offline tools read them (the group kinds) here.
//
// # Invariants
//
//   - One record per worker, written whole: every change to a worker's facts rewrites its record
//     (a Record is small), in the log batch of the events that change it or in a metadata commit
//     of its own. A worker the engine forgot (removed) has no record.
//   - A record names its partition by key (model_name, routing_group), never by id: ids of
//     dropped partitions are not reused, and a partition a record names is never dropped.
//   - A group kind name this version does not know (a record written by a newer kvindex, then a
//     downgrade) is not lost: Record.Kinds is the kinds it knows (the worker's ranks index those;
//     none known: the partition's or the server's setting), Record.UnknownKinds names the others,
//     the engine logs them at start (worker_id, unknown_group_kinds), and every rewrite of the
//     record keeps them after the known names — until the worker's event source sets kinds
//     other than the known ones (its setting then replaces the list whole) or the worker is
//     removed. The format-4 upgrade keeps them too.
//   - Format 4 → 5 (Upgrade) converts the five per-worker prefixes of format 4 into records and
//     deletes them, in one synced batch that also sets the format version: a crash leaves the dir
//     in format 4 (nothing converted) or 5 (all of it), never a mix. The same batch deletes the
//     source config format 4 kept for each registration ("zmqsource/<source_id>"): a
//     registration's record is all that persists it (its source's config is built from it).
//
// # Record (global metadata 'K' | "worker/" | worker_id as decimal; JSON, UTF-8)
//
//	{"partition": {"model_name": "m", "routing_group": "default"},   // absent: not placed
//	 "door": "nats",                 // the kind of door that last fed it (engine.Source)
//	 "recovery_url": "http://...",   // its own recovery source (absent: --upstream)
//	 "group_kinds": ["full_attention", "sliding_window"],  // its event source's indexed kinds
//	 "lease": {"deadline_unix_ns": n, "ttl_ns": n, "implied": true},
//	 "registrations": [{"dp_rank": 0, "endpoint": "tcp://...", "replay_endpoint": "...",
//	                    "block_size": 16, "source_id": "dynamo-1-0"}]}   // Dynamo's /register
//
// Every field may be absent.
package worker
