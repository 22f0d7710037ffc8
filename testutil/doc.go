// Package testutil holds the oracle and helpers that tests share. It is for tests only: no
// production package imports it (the kvindex binary must not link it, nor the test-only modules
// it uses, goleak and errorfs; cmd/kvindex TestBinaryLinksNoTestOnlyPackages checks that).
//
//   - model.go: the reference model of the index (per rank held and reachable blocks);
//     deliberately naive (maps, linear scans, no concurrency) so it is easy to check by reading.
//     index, lanes, recovery and end-to-end tests compare their results against it.
//   - script.go: the compact one-line event notation of the datadriven scripts.
//   - fleet.go: the memory-bound tests' stream of unshared chains (ChainFleet).
//   - faults.go: the errorfs WAL-failure file system and the goroutines a fatally failed Pebble
//     leaves behind (for goleak).
//
// The Mooncake trace loader and the benchmark workload generator are not here: they are
// production code used by `kvindex bench` and `kvindex loadgen`, in package workload.
package testutil
