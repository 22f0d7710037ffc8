// Package server is kvindex's service: the HTTP doors of one engine. It opens the engine over the
// data dir, has it rebuild the index from the log at start, and serves the HTTP API of
// docs/API.md: each route decodes its request, calls the engine (or the event sources, package
// sources; the peer bootstrap, package peers; the status page, package statuspage) and writes the
// answer; the metrics export what those packages count. What is not HTTP lives below it. It is a
// package of its own, not part of cmd/kvindex, because the CLI must stay a thin shell over a
// library and tests drive the same handler in-process.
//
// Invariants:
//   - One data path: every event, from any route, goes decode → validate whole → lanes.Submit
//     (cursor → log → tree); the response is written only after Submit returned, i.e. once the
//     events are durable under the configured durability.
//   - Bad input is answered 4xx with {"error": "..."} (and "index" for the first bad event) before
//     anything is submitted; nothing of a rejected request is written.
//   - Until the restart replay (and the --peers bootstrap, package peers) is done, /readyz, every /v1
//     route and Dynamo's routes (dynamo.go) answer 503; /healthz, /health, /metrics and the
//     status page / (package statuspage) answer 200.
//   - After a fatal store error (failure.go) /healthz, /health, /readyz and every mutating route
//     answer 503 {"error": "store failed …: <cause>"} until restart; reads are still served, and
//     the range route serves no event past a rank's durable cursor.
//   - Every route of the route table (http.go) is an operation of the OpenAPI document (package
//     openapi, served at GET /openapi.json) and the reverse (TestOpenAPICoversEveryRoute); every
//     exchange of this package's tests is validated against it (TestMain, testutil/openapitest).
//     JSON timestamps are RFC 3339 with milliseconds (timeLayout, leases.go).
//   - Every metric lives in the Server's own Prometheus registry (no global state).
//   - kvindex_memory_bytes{part} names every part that grows with load and has a bound or follows
//     the live set (engine.Engine.Memory): Pebble's memtables and block cache
//     (Config.MemTableSize, CacheSize), the trees, the TreeDump cache, the approximate side
//     index; each bounded part's bound is kvindex_memory_limit_bytes{part}. A scrape walks no
//     blocks or entries, and no metric reads every rank's state but kvindex_ranks.
package server
