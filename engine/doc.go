// Package engine is kvindex's one engine behind every door (docs/ENGINE.md): it opens and
// recovers a data dir (store, log, partitions, lanes, side index, tiers) and offers one ingest
// door and one query. The HTTP server (server/), the event sources (sources/ over vllm/ and
// natsrc/), the peers' bootstrap (peers/), the status page (statuspage/), the Go library (the
// root package) and `kvindex bench` all call it; none keeps its own copy of placement, logging
// or scoring.
//
// Invariants:
//   - One ingest door: every event is placed in its partition (created when needed) and its
//     worker placed there before anything is logged (Place, Ingest); a worker of another
//     partition fails the whole batch (partition.ErrWorkerElsewhere) and nothing of it is
//     written. Then log → lane → tree (lanes.Pipeline.Submit).
//   - A worker is one record (workers.go; docs/CONTRACT.md §14): its partition, door kind,
//     recovery URL, event source's group kinds, lease and Dynamo registrations, in one table
//     under one lock, persisted whole as one metadata record (package worker; format 5). Writes
//     of one record land in the order they were built (the record's wmu). The worker methods:
//     Place (every door, every batch), Remove (DELETE, the lease sweep, the library: ranks,
//     lease and record go, registrations stay; an emptied partition nobody is placed in is
//     dropped), Register and Unregister (Dynamo's routes), SetLease (ttl 0 ends it),
//     SetRecoverySource, Worker and Workers (reads), WorkerPartition (a route's partition).
//   - One query: the device tree's scores, each rank raised to its side score where that is
//     higher (approximate mode, the max rule), extended by the lower tiers unless device-only,
//     then min_score and top_k (Query). The library and both find_matches routes answer from it.
//   - Range answers are chosen by recovery.RangeRule (a pure function) and served for every
//     partition; recovery fetches name the rank's partition on the wire and keep its local id.
//   - Durable metadata (worker records, peers, source configs) is written through CommitMeta
//     only — but for the worker records an HTTP ingest batch changes (a worker's door, its
//     placement) and the leases the event sources imply (Config.SourceLease), written in the log
//     batch of the events that change them. An event source's placement (Place) writes its
//     record in a commit of its own, before the source submits the events.
//   - Every door names its kind (Source: http, zmq, dynamo, nats, peer, library, decisions) where
//     it places events (Place with a Placement, Batch.Source); the engine keeps each worker's kind
//     in its record and counts outcomes per partition and kind (accuracy.go). The event sources
//     submit through SourceDoor, the only exported submit of placed events, which renews their
//     workers' implied leases (lease.go).
//   - A memory bound (Config.MaxIndexBytes, bound.go) only measures here; the lanes evict, on
//     each rank's writer, and nothing of it is logged (docs/ENGINE.md "Memory bound").
//   - Which KV-cache group kinds a rank indexes is resolved in one place (groupgate.Settings:
//     its source's setting (the worker's record), else its partition's, else the server's), read
//     by the lanes wherever the log is applied; a source's changed setting rebuilds the worker's
//     ranks.
//   - Queries first (admission.go): every ingest door (Ingest, IngestBatches,
//     SourceDoor.SubmitWithMeta) takes its events' share of one bound on the events in flight (Config.
//     MaxIngestInFlight) before it places or logs anything, and holds it until the batch is durable
//     and applied; a batch beyond it waits in arrival order — a bounded door (HTTP) at most
//     Config.IngestWait, then ErrOverloaded and nothing written. A context from Admit carries its
//     share, so nested ingest calls take none again. The query path takes no share and no lock
//     an ingest holds across a commit (partition.Set.Ensure commits a new partition outside the
//     lock Lookup takes, and Drop deletes a record outside it too).
//   - The views every door reads are computed here once: every rank with its mode, tier blocks,
//     side entries and evictions (Ranks, ranks.go), the memory parts and their bounds (Memory,
//     memory.go: each part's own accounting or estimate, no cost per entry assumed here), and
//     the accuracy series (AccuracySeries: no rank is read, so a scrape locks none).
//   - The engine changes no process-global setting (GC percent) unless Config.TuneGC asks.
//   - The engine imports no HTTP server, status page, pprof, ZMQ or NATS client, and no
//     Prometheus (the TreeDump cache, package dumpcache, keeps plain counters the server
//     exports): the library links it alone (tests check `go list -deps`).
package engine
