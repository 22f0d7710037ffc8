// Package vllm owns vLLM KV-events ZMQ ingestion: decoding the publisher's wire, one subscriber
// per publisher, seq cursors and replay. It is its own package because none of the existing ones
// owns an external wire protocol.
//
// # The wire
//
// vLLM's publisher sends each KVEventBatch as one PUB message of three frames:
//
//	+---------+-------------------+---------------------------+
//	| topic   | seq               | payload                   |
//	| bytes   | uint64 big-endian | msgpack KVEventBatch      |
//	| (may be | 0 at publisher    |                           |
//	|  empty) | start, +1/batch   |                           |
//	+---------+-------------------+---------------------------+
//
// The payload is an array [ts float64, events array, data_parallel_rank int|nil] (older
// publishers send the first two only) or a map {"ts", "events", "data_parallel_rank"}. An event
// is a tagged array (older vLLM):
//
//	["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
//	 lora_name, extra_keys?, group_idx?, kv_cache_spec_kind?, kv_cache_spec_sliding_window?]
//	["BlockRemoved", block_hashes, medium, group_idx?, kv_cache_spec_kind?, kv_cache_spec_sliding_window?]
//	["AllBlocksCleared"]
//
// or a map with "type" = the tag and the same field names (newer vLLM, trailing defaults
// omitted). Decoding is by key: unknown keys and extra array elements are skipped. A hash is an
// integer (above 2^63 as msgpack uint64; negative ones, from older vLLM's signed hash(), are
// reinterpreted as two's complement uint64) or bytes (the last 8 bytes, big-endian).
//
// Replay: a DEALER sends ["", start_seq as 8 bytes BE] to the publisher's ROUTER; the answer is
// one message per buffered batch with seq ≥ start, ["", seq, payload] (older) or
// ["", topic, seq, payload] (newer), then ["", ff×8, ""]. When the buffer no longer holds start
// the answer silently starts later: the difference is counted lost.
//
// # Mapping to RouterEvents
//
// A batch's events go to rank (worker_id, data_parallel_rank, or the source's configured DPRank,
// or 0). The worker id is configured per source, or derived from the topic kv@<pod>@<model> as
// XXH3-64(<pod>) with the top bit cleared (WorkerIDFromTopic). The rank's partition (docs/CONTRACT.md §9) is
// resolved per batch by Options.Placer from the source's ModelName / RoutingGroup, else the
// topic's <model> (ModelFromTopic), else the default partition; a batch the Placer refuses (a
// block size mismatch, a worker of another partition) is counted rejected and skipped. Event ids are kvindex's, contiguous per rank (the rank's newest
// logged id + 1, or 1), so ranges served to other kvindex instances stay gap-free; the publisher's
// seq is kept beside them as the source's cursor (below). tokens_hash is kvindex's own block hash
// of a block's token_ids (event.BlockHashes, with the batch's block_size and lora_name), block_hash the
// engine's hash. group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window and the block size of
// a hybrid model's KV-cache group become the event's event.Group (a kind this build does not know
// is event.GroupKindOther, logged once per source); the lanes decide what it means (lanes/groups.go, groupgate).
// Media map to storage tiers as Dynamo's do (TierOf, docs/CONTRACT.md §7): GPU, DEVICE (or
// absent) are the device tier; CPU, CPU_PINNED, CPU_TIER1 host_pinned; CPU_TIER2, DISK, NVME,
// STORAGE disk; EXTERNAL, NETWORK, REMOTE, SHARED external; any other medium is taken as device
// and counted (unknown_medium). The lanes apply lower-tier events to their tier's index. A BlockStored whose token count is not block_count × block_size is rejected and counted.
//
// # Seq cursors and recovery
//
// A source's cursor is the seq of the newest batch it applied. It is written as global metadata
// CursorMeta(id) = 8 bytes BE in the same log batch as that batch's events (atomic: a batch is
// one rank), so a restarted kvindex resumes from the log and replays only what it did not log.
// Batches without events (empty, all rejected, malformed) move the in-memory cursor only; a
// restart replays them again, harmlessly. For each live message, in order:
//
//   - seq ≤ the previous live seq (or, first after a start, ≤ the persisted cursor): the
//     publisher restarted — a new epoch: a Cleared for every rank of its worker, and the stream
//     starts over from 0;
//   - seq ≤ cursor: already applied by a replay, skipped;
//   - seq > cursor+1 (or > 0 for a late joiner with a replay endpoint, or the first batch of a
//     new epoch): a gap — batches [cursor+1, seq) are replayed from the ROUTER; what the replay
//     does not return (it starts later, ends early, fails) is lost;
//   - then the batch is applied.
//
// Lost batches clear every rank of the publisher (unless Options.KeepOnLoss): a missed
// BlockRemoved would otherwise make the index over-count forever, as for a lost
// event id. A seq restart that overtakes the old seq before kvindex reconnects cannot be told
// from a gap (the wire carries no epoch); it is replayed as a gap.
//
// # Ownership
//
// A Manager owns one goroutine per source (Add starts it, Remove and Close stop it and wait).
// Each goroutine owns its SUB socket (redialled with exponential backoff from Options.BackoffMin
// to BackoffMax), its DEALER for the duration of a replay, its cursor and its decoder. Live
// messages wait in the SUB socket while a replay runs. Status and Collect read counters without
// stopping the sources.
package vllm
