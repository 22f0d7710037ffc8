// Package recovery owns the decisions of a rank's lifecycle (docs/CONTRACT.md §5): the per-rank state machine
// that decides, for every live event, recovery answer, source change and restart, what to apply,
// what to buffer, what to fetch and what was lost (Machine); how a rank is rebuilt from its
// snapshot and log and how a log prefix is folded into a snapshot (ReplayRank, which reads the
// log only after the snapshot's id; Fold, which only trims the log under a newer checkpoint); the client
// of an upstream's range route (Fetcher); and the wire shapes of the range answers (Answer,
// shared with the server side). Package lanes is the single executor of its decisions.
//
// # Machine: inputs → Decision
//
// Machine is pure: no I/O, no goroutines, no clock. The rank's lane feeds it (OnLive,
// OnAnswer, SetHasSource, RequestRestore, Resume) and performs the returned Decision in the
// order its doc gives (cancel, reset, replace, apply, ledger, fetch, pending). A Decision's
// slices are scratch, valid until the next call.
//
//	cursor:   Initial ──first event / Cleared──▶ Live(last) ◀──Cleared, TreeDump, Events──┐
//	                                                                                      │
//	live event (cursor Live(last), id):                                                   │
//	   id ≤ 1 < last ............................ new epoch: Reset, Cleared(id), event ───┤
//	   Cleared, id > last ....................... barrier: cancel fetch, drop pending ─────┤
//	   id ≤ last ................................ ignore (stale)                          │
//	   recovery in flight ....................... buffer (cap, lowest id dropped)         │
//	   id = last+1 .............................. apply ───────────────────────────────────┤
//	   gap, source ........ buffer, fetch(start=last+1) ──▶ recovering ──answer──▶ drain ─┘
//	   gap, no source (or the last recovery from here failed):
//	                        lost [last+1, id-1], Reset, apply, degraded
//
//	state:  live ──gap with source──▶ recovering ──Events/TreeDump──▶ live (or recovering again:
//	                                      │                               follow-up fetch)
//	                                      └─TooNew/InvalidRange/Failed/source removed──▶ degraded
//	                                        (the gap recorded lost, the buffered run applied)
//	        live ──gap without source──▶ degraded ──Cleared or TreeDump──▶ live
//
// # Decisions this package takes where docs/CONTRACT.md §5 is silent
//
//   - Tokens: every fetch gets a token, rising from 1 per rank. OnAnswer with a token other than
//     the one in flight is discarded (StaleAnswer): a Cleared, a new epoch or a source removal
//     cancelled it. A removed rank gets a new Machine, so its late answer is discarded too.
//   - Publisher restart: an id of 0 or 1 below the cursor (for any kind, checked before the
//     Cleared and stale rules) opens a new epoch. Decision: Reset + NewEpoch, Apply = [a
//     synthetic Cleared carrying the new event's id, the event]. The synthetic Cleared takes the
//     new event's id so it sorts with the new epoch and never invents an id the publisher may
//     use; Reset tells the driver to drop the rank's older log and snapshot first. A log that
//     keeps one record per id may let the event overwrite its Cleared: after the Reset the
//     state is empty either way, so replay is the same. A new epoch that starts with a Cleared
//     gets no synthetic one.
//   - Pending cap: "oldest" is the lowest id (pending is kept in id order; in-order delivery
//     makes it the first arrived). A duplicate id in pending is ignored.
//   - Recovered ranges: the ids in (old cursor, min(new cursor, highest pending)] that were not
//     buffered. Ids above the highest pending were never seen missing, so they are not gaps.
//   - Failure (docs/CONTRACT.md §5 lifecycle rule 1): the buffered events were acknowledged, so they are not
//     dropped. The last contiguous run of them is applied; the ids from the cursor (or 1, for an
//     Initial rank) up to that run are recorded lost — buffered events before the run fall in
//     that range, the reset would erase them anyway; the rank is reset (when it had state) and
//     degraded. With nothing buffered the state is unchanged. The next gap after a failure does
//     not fetch again (an upstream that cannot serve would otherwise stall the rank forever): it
//     takes the no-source path (loss, reset, apply). A later gap fetches again.
//   - Source changes (rule 3): SetHasSource(true) on a degraded rank starts a full restore at
//     once; SetHasSource(false) with a fetch in flight cancels it and fails the recovery
//     (ErrNoSource), as above.
//   - Restart: Restore rebuilds the state from the durable cursor, degraded flag and pending
//     events; Resume then restarts the recovery of pending events (or, without a source, fails it
//     as above), or starts a full restore of a degraded rank that has a source.
//   - Pending durability: every Decision that changes the buffered set says so (PendingChanged,
//     PendingFrom, PendingEmpty); the set only ever loses its lowest ids or all of them, so
//     "delete every durable pending id below PendingFrom" keeps the durable copy exact.
//   - Degraded has two grades. After a failed recovery with nothing buffered the state is exact
//     up to the cursor: the next successful recovery from the cursor repairs it. After a reset (a
//     gap without source, or a failed recovery that applied its buffered run)
//     blocks stored before are missing: only a Cleared or a TreeDump repairs it, so every
//     recovery of such a rank, follow-ups included, is a full restore; SetHasSource(true) and
//     RequestRestore start one at once.
//   - Cleared is rank-scoped (docs/CONTRACT.md §3): a live Cleared erases the buffered events below it; any
//     buffered above it (delivered out of order) are taken again as live events after it.
//   - An Events answer: events before its last Cleared are skipped (the Cleared erases them);
//     ids ≤ cursor are skipped; a hole inside the answer (a server bug) stops the apply there
//     and the drain fetches again; an answer that makes no progress while events are pending
//     counts as failed (ErrBadAnswer), so a broken upstream cannot loop the rank.
//
// Invariants (checked by the tests, among them the rapid property
// TestRule1AcknowledgedEventsNeverVanish with source changes and restarts): every acknowledged
// event is applied, or inside a recorded lost range, or erased by a later Cleared, TreeDump or
// reset; the cursor never moves while a recovery is in flight;
// pending is sorted, unique, every id above the cursor, never a Cleared, and empty unless a
// recovery is in flight; at most one fetch
// is in flight per rank; every event the driver applies has an id above the cursor it found,
// except a new epoch's and a Cleared's (which reset); with a source and answers that succeed,
// the rank's state ends equal to the upstream's.
//
// # Fetcher
//
// Fetcher GETs {base}/v1/ranks/{worker_id}/{dp_rank}/events?start=&limit=, follows pages of
// Events until caught up, retries transport errors, 5xx and 429 (8 tries, 200 ms·2^n), holds
// at most 16 fetches in flight, and honours its context. It starts no goroutines.
package recovery
