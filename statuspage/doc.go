// Package statuspage is kvindex's status page (GET /): one server-rendered HTML page, no
// script, that reloads itself — the replay's progress, the partitions, the ranks by state, the
// KV-cache groups of hybrid models, the ZMQ sources, the upstream recovery sources, the leases
// and the measured accuracy. It owns the page's template and its view of the engine; the server
// serves the bytes and supplies what only it knows (Input).
//
// Invariants:
//   - It answers during the restart replay too (that is when an operator looks at it) and reads
//     only in-memory state plus Pebble's size counters, so it is cheap enough to leave open.
//   - At most maxRankRows ranks are listed per state (and per groups table): the page stays
//     small with 10,000 ranks; the others are counted.
//   - Every table row carries a data- attribute naming what it shows, for tests and scrapers.
package statuspage
