// Package groupgate is the KV-cache group gate of hybrid models (docs/API.md "KV-cache
// groups"), below the lanes: a pure per-rank filter in front of a rank's tree. vLLM reports every
// block once per KV-cache group; while a rank has one indexed group its events reach the tree as
// they are, and from the second on the tree holds exactly the blocks every indexed group holds
// whose parent chain it holds too (the prefix they share: exact, never an over-count).
//
// It owns: State (a rank's learned groups and its gate; Apply, Dump for snapshots, Replay for
// rebuilds), Fold (retention of a rank with groups), ReplayRank/NewTree/IsSnapshot (the offline
// tools' rebuilds) and Settings (which kinds each rank indexes: its worker's source, else its
// partition, else the server; durable per worker under MetaPrefix). The lanes apply through it
// online; the offline tools use it directly and link no lanes.
//
// Invariants: a gate is driven by one rank's applier only; a rebuild sees one setting (Fixed)
// from its first event to its last; Dump reports ok=false when the state holds blocks no
// snapshot can express (the caller keeps the log).
package groupgate
