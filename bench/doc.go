// Package bench is the benchmark harness library behind `kvindex bench` and `kvindex loadgen`
// (its stages, metrics and targets: docs/BENCHMARKS.md). It is its own package because nothing existing fits: the index,
// lanes, wal and server packages are the things measured, and the CLI must stay a thin shell
// whose logic tests can call directly.
//
// # What Run does, in order
//
//  1. Workload: a workload.Stream (LoadStream): copy 0 of the trace simulated once
//     (workload.NewStream), the other copies derived from it chunk by chunk by each stage that
//     reads the stream; or a workload dir read whole (workload.StreamOf). Not timed.
//  2. Ingest: the whole stream through the engine's ingest door (engine.Open + Recover, then
//     Engine.Ingest: place, cursor → log → lane → tree) by Producers goroutines. Rank number i in
//     order of first appearance belongs to producer i % Producers, which submits that rank's
//     events in stream order, Batch events per Ingest (drive.go): the stream is generated
//     chunkEvents at a time, then the producers hand that chunk's events on, the
//     generation untimed, a producer's short tail kept for the next chunk (so its batches are
//     those of its whole stream, wherever the chunks end; --scale 8 is one chunk).
//  3. Queries: Engine.FindInto for the sample (Options.Queries, default 100,000: an evenly
//     spaced sample of the non-empty queries, all of them up to --scale 8) on the final index,
//     each call timed alone; the same pass with the collector off and with collections
//     running back to back beside it (gcstats.go: the GC's effect on the tail); the tier walk;
//     then again, in one closed-loop querier, while a second copy of the stream (worker ids
//     shifted past every worker of the first, so none of it is stale) is ingested the same way,
//     rate-limited to half of the events/s stage 2 reached (the querier pauses while a chunk is
//     generated).
//  4. Restart: stage 3's idle pass is timed once more (find_matches_prerestart_*), the sample's
//     answers are digested, the engine closed and collected, then Open +
//     Recover on the same data dir, timed until ready. Every sampled query is then answered by
//     the rebuilt index: any difference fails the run with ErrScoresDiffer and the first
//     mismatch. Then stage 3's idle pass is timed again on it (find_matches_restarted_*).
//  5. Baselines on the same events: (a) a fresh in-memory index.Index fed by the same producer
//     split, no log (also where heap bytes per entry are measured); (b) the raw Pebble ceiling:
//     the same log records as the pipeline writes (a wal.Batch's Appends: one record per rank's
//     run of consecutive events in a commit), Batch events per commit, the same producers and
//     sync mode, on a fresh store, and nothing else (no cursors, no decisions, no tree).
//
// Each of stages 2–5 is bracketed by runtime.GC() and a reading of runtime/metrics' CPU
// classes: gc_cpu_share_* is the GC's share of GOMAXPROCS × the stage's wall time. The run
// ends with its wall time and the process's peak RSS (VmHWM).
//
// With Options.Approximate (approximate mode, docs/CONTRACT.md §8) stages 2–5 are replaced: no event is
// ingested; each non-empty query, in workload order, is first scored with engine.Find
// (event-fed and side scores merged; the event tree stays empty, so this is the side index) and
// then its routing decision (Query.Worker, the query's block hashes) is recorded through
// engine.RecordDecision, the POST /v1/routing_decisions path. See approxStages.
//
// RunSMG (smg.go, `kvindex bench --workload smg-pinned|smg-fragmented|smg-large`) is the other
// workload: SMG's pinned stream (workload.GenerateSMG) applied to a fresh in-memory index on
// one goroutine, then every query of SMG's cells timed alone and checked against the
// workload's model; it reports what SMG's README reports (bytes per holder-block as live heap,
// RSS delta and settled RSS; write blocks/s; p50/p99 per cell, SMG's rank-rounded quantile).
//
// LoadGen (`kvindex loadgen`) posts the same workload to a running server over HTTP. With
// LoadOptions.Loop it keeps posting workload.Generator laps until Duration, at a constant live
// set, while it samples the server's RSS from /metrics (rss.go): the run behind docs/BENCHMARKS.md
// "Memory: what bounds RSS". It reads every find_matches answer whole, as a router in Go would
// read it fast: one valyala/fastjson parse into typed scores (querier.decodeAnswer).
//
// Paced phases (LoadOptions.Phases, `loadgen --phases 50,90,100`, loadphases.go): the stream is
// posted once per phase, each phase's worker ids shifted past the previous phases' so every event
// is new to the server: first unpaced (the 100 % phase, the reference rate), then each other
// phase paced at its percentage of the events/s the unpaced one reached (`--ingest-rate`, an
// alias of `--rate`, paces a plain run at a fixed rate). Each phase reports its target and
// reached events/s and the find_matches and /healthz p50 and p99 of the querier beside it
// (PhaseMetric). The targets of docs/BENCHMARKS.md "Queries first" are read at 90 % and 100 %.
//
// Pinning (LoadOptions.Pin, `loadgen --pin`, pin_linux.go): the server is found as the process
// holding a listening socket on the target's port (/proc/net/tcp and tcp6 give the socket's
// inode, /proc/<pid>/fd its owner); every thread of it (/proc/<pid>/task) is given all the CPUs
// this process may use but the last with sched_setaffinity (golang.org/x/sys/unix), and every
// thread of loadgen the last one. Threads started later inherit the set. Client and server then
// never share a core, as `taskset -c 0 kvindex serve` beside `taskset -c 1 kvindex loadgen` does,
// without starting the server under taskset. The server keeps the GOMAXPROCS it started with
// when it sets it itself (`serve --min-procs`, default 2); one that leaves it to Go follows the
// new CPU set down to 1 (Go 1.25+). Linux only; elsewhere --pin is an error (ErrPin).
//
// # Invariants
//
//   - One data path: stage 2 and the loaded part of stage 3 use the engine's ingest door and its
//     one query, as `kvindex serve`; no stage writes to the index or the log any other way.
//   - Memory is the index's, not the workload's: a stage holds one chunk of events (and the
//     producers' tails), the stream its copy-0 workload and hash table, stages 3–4 the sample
//     and 16 bytes per sampled answer.
//   - Nothing is asserted about time: Run reports metrics (Report), it never fails because a
//     number is slow. It fails for wrong answers (ErrScoresDiffer), wrong ingest (ErrIngest) and
//     errors of the parts it drives.
//   - Every goroutine Run or LoadGen starts is stopped before it returns, including on error or
//     cancellation; temporary data dirs are removed.
//
// Metric names and units are part of the contract (tools read them): see the Metric* constants.
package bench
