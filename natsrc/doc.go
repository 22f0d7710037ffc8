// Package natsrc consumes Dynamo's event plane on NATS (docs/CONTRACT.md §10): NATS Core subjects carrying
// msgpack EventEnvelopes, and JetStream streams of JSON RouterEvents through one durable pull
// consumer per kvindex replica. Sources are run by a Manager (one goroutine each, reconnecting
// with backoff) and submit to the lanes like every other write.
//
// # Exactly once (JetStream)
//
// A burst of fetched messages is split by rank; each rank's events go to lanes.SubmitWithMeta
// with RankSeqMeta (the newest stream sequence among them) in the same log batch, and with the
// previous burst's PositionMeta. Messages are acknowledged once every batch of the burst
// committed — the last one with DoubleAck, so the consumer's ack floor on the server is exact
// (a plain Ack is fire-and-forget; ack-floor purges rely on it). Each session recreates the
// durable consumer at PositionMeta+1: a crash between commit and ack, a lost ack or a
// redelivery brings back messages that the rank sequences skip, never applies them twice (a
// redelivered id 1 would otherwise open a new epoch and reset the rank).
//
// # Replicas
//
// Replicas apply the same stream in the same order, so their trees, and GET /v1/dump, agree. A
// replica whose position lies before the stream's first retained message bootstraps from a peer:
// GET /v1/dump?stream=NAME answers the dump taken while the peer's source is between bursts
// (Manager.AtStreamSeq), with HeaderStreamSeq and HeaderRankCursors; each rank is installed with
// lanes.Pipeline.Install at the peer's cursor, and consumption continues after the sequence.
//
// # Metadata keys (global metadata of the log)
//
//	js/<id>/seq                              PositionMeta: every message ≤ it is applied
//	js/<id>/rank/<partition>/<worker>/<dp>   RankSeqMeta: newest sequence applied to the rank
//	nats/<id>/pub/<publisher_id>             PublisherMeta: newest Core sequence of a publisher
//
// all 8-byte big-endian. The server keeps the configs of sources added over HTTP under
// "natssource/<id>".
//
// A source's partition and its indexed KV-cache group kinds (Config.IndexedGroupKinds) reach the
// engine through Options.Partition, once per worker in every burst, before its events: no source
// keeps a worker's placement from one burst to the next, so a worker removed meanwhile (DELETE,
// a lease's expiry, its partition dropped) is placed anew, with the source's group kinds.
package natsrc
