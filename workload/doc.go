// Package workload owns the benchmark input of kvindex (docs/BENCHMARKS.md stage 1): the Mooncake trace
// loader and the simulated workers that turn a trace into the Stored/Removed event stream and the
// find_matches queries a KV-aware router would see. `kvindex bench` and `kvindex loadgen`
// (package bench) drive it, and tests use the same streams, so benchmark and tests measure one
// thing. It is production code: it imports no test-only package (the kvindex binary links it;
// cmd/kvindex TestBinaryLinksNoTestOnlyPackages checks that).
//
//   - trace.go: LoadTrace / LoadTraceFile (bad lines named by 1-based number) and Scale (--scale
//     disjoint copies, hash ids shifted by ScaleOffset per copy).
//   - workload.go: Generate (workers with prefix-closed LRU caches routed by cost), Generator (the
//     same simulation continued lap after lap over the trace, for `kvindex loadgen --loop`), Worker, and
//     the workload dir format (WriteWorkloadDir / ReadWorkloadDir, events.ndjson and
//     queries.ndjson); its own decisions are listed at the top of that file.
//   - smg.go: GenerateSMG, SMG's pinned workload (its radix tree's normative stream: 12.8 M
//     holder-blocks over 256 holders, SplitMix64 seed 20260901) and its fragmented and 128 M
//     profiles, regenerated draw for draw from their description, with the model of every
//     answer (each instance's first hole); bench.RunSMG and `kvindex bench --workload
//     smg-pinned` drive it.
//
// # Invariants
//
//   - Generate is deterministic: the same trace, scale and WorkloadOptions give the same
//     Workload, event for event and query for query. No function modifies its inputs.
//   - In a generated stream, per rank the event ids run 1, 2, 3, … with no gap, over both tiers
//     when WorkloadOptions.HostBlocks offloads evictions to host memory; a device Removed names
//     only cached blocks with no cached child (leaves first); a Stored's parent is the deepest
//     prompt block the worker held (or the root); queries come in stream order.
//   - A Generator's laps continue one simulation: per rank the ids keep running across laps, and
//     no worker ever caches more than CacheBlocks blocks, so the live set is bounded by Workers ×
//     CacheBlocks per copy however long it runs. Lap 0 is Generate's workload.
//   - Every Query.AfterEvent lies in [0, len(Events)]: ReadWorkloadDir refuses any other.
//   - An input is refused whole on its first bad line; nothing partial is returned.
//
// Errors are sentinels, wrapped with context and checked with errors.Is: ErrBadTrace (with the
// line number), ErrScale, ErrBadOptions, ErrBadWorkload (with file and line number) and
// ErrGenerate (a broken internal invariant: a bug).
package workload
