// Package peers is the peer bootstrap (`serve --peers URL,…`, docs/CONTRACT.md §9): at start,
// after the restart replay and before the server is ready, every partition that is empty (no
// ranks) is filled from the first peer whose GET /dump answers — a kvindex or a Dynamo
// standalone indexer: one dump, the {"<model>:<group>": {"block_size", "events"}} shape of
// Dynamo's /dump. The server only names the peers (its --peers flag's, then those registered
// with /register_peer) and exports the counters.
//
// Invariants:
//   - The peers are tried in order; the first that answers is the only one applied.
//   - Each partition's events go through the engine's ingest door (engine.SourcePeer: cursor →
//     log → lane → tree), so they are durable and a later restart replays them instead of
//     asking the peers again. Event ids are renumbered 1, 2, … per rank in dump order (a Dynamo
//     dump's ids need not rise per rank).
//   - A partition that is not empty here is kept; one a JetStream source feeds is left to the
//     source (Options.Skip), which bootstraps it at a stream position. A partition the dump
//     names that does not exist here is created with the dump's block size (an empty dump
//     too); a local partition with another block size, or events of a worker that belongs to
//     another partition here, are skipped, logged and counted (Bootstrapper.Skipped: a
//     partition the peer failed, or whose key or events are malformed, counts too).
//   - A peer that answers 503 is starting itself (replaying, or bootstrapping from its own
//     peers, as two replicas that name each other do on their first start): information, not a
//     failure; a peer that cannot be reached is a warning; one that answers anything else (401,
//     404, a malformed dump) is an error, a misconfiguration to fix. When no peer answers, the
//     partitions start empty.
package peers
