// Package testutil holds what tests across kvindex share: the SPEC §3 reference model of the
// index (model.go), and — added by their owners — event and workload generators, mock workers
// and the trace loader. Nothing here is used by production code.
//
// The Model is deliberately naive (maps and linear scans, no concurrency) so that it is easy to
// check by reading; index, recovery and restart tests compare their results against it.
package testutil
