// Package event owns kvindex's event model: the RouterEvent of docs/API.md (Stored, Removed,
// Cleared for one rank), its wire codecs (Dynamo's externally tagged JSON and msgpack with named
// fields), strict validation, and the Dynamo-compatible block hashing of token sequences.
//
// It is a package of its own (not part of index/ or wal/) because every other package speaks it:
// wal/ encodes it on disk, index/ applies it, lanes/ and recovery/ route it, cmd/kvindex decodes it
// from HTTP. It has no dependency on any other kvindex package.
//
// It also names the states of an event source (SourceState), the one vocabulary of the vLLM ZMQ
// sources (vllm/) and the NATS sources (natsrc/), which import nothing of each other.
//
// Invariants:
//   - Hashes and ids are uint64 end to end. JSON numbers are decoded digit by digit into uint64,
//     never through float64; a value that is negative, fractional, has an exponent or exceeds
//     2^64-1 is rejected.
//   - A batch is validated whole: DecodeJSONBatch, DecodeNDJSON and DecodeMsgpackBatch return
//     either every event or a *DecodeError naming the index of the first bad event and the field.
//   - DecodeJSONBatchKeys, DecodeNDJSONKeys and DecodeMsgpackBatchKeys (the server's door) decode,
//     validate and check keys (repeated, unknown) in one pass over the bytes (json_fast.go,
//     msgpack_fast.go); a body that pass cannot decide exactly as the checked decoder plus the key
//     check would goes to that pair, so every error message is theirs (FuzzDecodeJSONKeys,
//     FuzzDecodeMsgpack hold the two to the same answers).
//   - RouterEvent is a flat value: Kind says which of Parent/Blocks (Stored) or Removed (Removed)
//     are meaningful; a Cleared carries neither.
package event
