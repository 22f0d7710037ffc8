// Package server is kvindex's service: it opens the data dir (store, log, index, lanes), rebuilds
// the index from the log at start, and serves the HTTP API of docs/API.md. It is a package of its own,
// not part of cmd/kvindex, because the CLI must stay a thin shell over a library and tests drive
// the same handler in-process; no existing package (lanes, recovery, ...) owns HTTP.
//
// Invariants:
//   - One data path: every event, from any route, goes decode → validate whole → lanes.Submit
//     (cursor → log → tree); the response is written only after Submit returned, i.e. once the
//     events are durable under the configured durability.
//   - Bad input is answered 4xx with {"error": "..."} (and "index" for the first bad event) before
//     anything is submitted; nothing of a rejected request is written.
//   - Until the restart replay (and the --peers bootstrap, peers.go) is done, /readyz, every /v1
//     route and Dynamo's routes (dynamo.go) answer 503; /healthz, /health, /metrics and the
//     status page / (status.go; its KV-cache groups section, status_groups.go) answer 200.
//   - A ZMQ source's indexed_group_kinds reach the engine through Place (sources_zmq.go), before
//     any event of its batch is decided; --partition-group-kinds is parsed here too.
//   - After a fatal store error (failure.go) /healthz, /health, /readyz and every mutating route
//     answer 503 {"error": "store failed …: <cause>"} until restart; reads are still served, and
//     the range route serves no event past a rank's durable cursor.
//   - Every route of the route table (http.go) is an operation of the OpenAPI document (package
//     openapi, served at GET /openapi.json) and the reverse (TestOpenAPICoversEveryRoute); every
//     exchange of this package's tests is validated against it (TestMain, testutil/openapitest).
//     JSON timestamps are RFC 3339 with milliseconds (timeLayout, leases.go).
//   - Every metric lives in the Server's own Prometheus registry (no global state).
//   - kvindex_memory_bytes{part} names every part that grows with load and has a bound or follows
//     the live set (memory.go): Pebble's memtables and block cache (Config.MemTableSize,
//     CacheSize), the trees, the TreeDump cache, the approximate side index; each bounded part's
//     bound is kvindex_memory_limit_bytes{part}. A scrape walks no blocks or entries.
package server
