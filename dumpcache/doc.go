// Package dumpcache is the TreeDump cache of the range route (docs/CONTRACT.md §5 "Serving
// ranges"), behind the engine: each rank's encoded TreeDump answer, kept in a bounded ristretto
// cache, built single-flight (one build per rank at a time, shared by its concurrent requests)
// and extended with a safe Stored tail instead of rebuilt while the rank only grows. It reads the
// ranks through Ranks (the engine: lanes, trees, log) and keeps plain counters (Counters); the
// server exports them to Prometheus, so the library links no metrics package.
//
// Invariants: an entry in the cache came from a successful build or extension and is served only
// while the rank is the same incarnation with the same cursor counters and the log still holds
// the entry's last event with the same record; a failed build deletes the rank's entry; at most
// one flight per rank runs at a time.
package dumpcache
