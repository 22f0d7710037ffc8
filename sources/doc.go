// Package sources owns kvindex's event sources as one set: the vLLM ZMQ publishers (package
// vllm) and the NATS Core and JetStream sources (package natsrc), their configurations (the
// --zmq, --nats and --jetstream flags, and those added at run time, persisted), their placement
// policy and their lifecycle. The server only starts them, passes its routes' requests on and
// reports their state; Dynamo's /register starts its ZMQ sources on ZMQ().
//
// Invariants:
//   - A source added at run time is persisted before it starts (metadata ZMQMetaPrefix+id or
//     NATSMetaPrefix+id → its normalized config as JSON); a removed one is stopped, then its
//     config and positions (cursors, stream positions, publisher ids) are forgotten in one
//     commit, so added again later it starts afresh. Flag sources are not stored: the flags
//     name them at every start; they keep their positions the same way, keyed by their id.
//   - Start runs once the lanes run: the flag sources, then the stored ones in key order, then
//     one per Dynamo registration, its config built from the worker's record
//     (RegistrationConfig: nothing else persists it); a stored source a flag also names runs
//     once. A stored config that cannot be read, or a source that does not start, is logged and
//     skipped.
//   - Add refuses an id under which a source of either kind runs (ErrExists), before storing
//     anything.
//   - Placement (Place, and the NATS partitioner): every batch is placed through
//     engine.Engine.Place (no placement is kept from one batch to the next). A ZMQ source's
//     partition is the one its config names (model_name, routing_group), else the model of its
//     topic kv@<pod>@<model> (routing group "default"), else the default partition; its block
//     size, when configured, must be the partition's (a new partition takes it), otherwise a
//     new partition takes the batch's block size and an existing one keeps its own. A NATS
//     source's partition is the one its config names. Each source's indexed_group_kinds reach
//     the engine with the placement, before any event of the batch is decided.
//   - A source's door kind is engine.SourceZMQ, engine.SourceDynamo for the sources of Dynamo's
//     /register (ids starting Options.RegistryPrefix), or engine.SourceNATS.
package sources
