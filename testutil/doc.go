// Package testutil holds the workloads and the oracle that tests and the benchmark share:
//
//   - model.go: the SPEC §3 reference model of the index (per rank held and reachable blocks);
//     deliberately naive (maps, linear scans, no concurrency) so it is easy to check by reading.
//     index, lanes, recovery and end-to-end tests compare their results against it.
//   - trace.go: the Mooncake trace loader (bad lines named by number) and --scale copies.
//   - workload.go: simulated workers with prefix-closed LRU caches routed by cost (BENCH.md
//     stage 1) emitting contiguous-id Stored/Removed events, and the workload dir format; the
//     decisions BENCH.md leaves open are listed at the top of that file.
//   - script.go: the compact one-line event notation of the datadriven scripts.
//
// The generator and the workload dir are also used by `kvindex bench` and `kvindex loadgen`
// (package bench): the benchmark and the tests drive the same streams. Nothing else in
// production code imports this package.
package testutil
