// Package recovery owns the router side of event-stream recovery (SPEC §5): the per-rank state
// machine that decides, for every live event and every recovery answer, what to apply, what to
// buffer, what to fetch and what was lost (RankState); the client of an upstream's range route
// (Fetcher); and the wire shapes of the range answers (Answer, shared with the server side).
//
// # RankState: inputs → Decision
//
// RankState is pure: no I/O, no goroutines, no clock. The rank's lane feeds it (OnLive,
// OnAnswer, Invalidate, SetHasSource, RequestRestore) and performs the returned Decision in the
// order its doc gives (cancel, reset, replace, apply, ledger, fetch, invalidate siblings). A
// Decision's slices are scratch, valid until the next call.
//
//	cursor:   Initial ──first event / Cleared──▶ Live(last) ◀──Cleared, TreeDump, Events──┐
//	             │                                 │  ▲                                   │
//	             │ Invalidate (worker-wide         │  │ next id > last, applied            │
//	             ▼ barrier of a sibling)           ▼  │ without gap recovery               │
//	          InvalidatedByBarrier(last?) ◀───Invalidate                                  │
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
//	                                      └─TooNew/InvalidRange/Failed──▶ degraded
//	        live ──gap without source──▶ degraded ──Cleared or TreeDump──▶ live
//
// # Decisions this package takes where SPEC §5 is silent
//
//   - Tokens: every fetch gets a token, rising from 1 per rank. OnAnswer with a token other than
//     the one in flight is discarded (StaleAnswer): a Cleared, a new epoch or Invalidate
//     cancelled it. An answer for a removed rank has no RankState to go to: the driver drops it.
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
//   - Failure: cursor unchanged, pending dropped, lost = [last+1, highest pending] (or the
//     pending span when the cursor is Initial), rank degraded. The next gap from the same cursor
//     does not fetch again (an upstream that cannot serve would otherwise stall the rank
//     forever): it takes the no-source path (loss, reset, apply). A later gap fetches again.
//     An Initial rank whose restore failed applies its next event mid-stream, degraded.
//   - Degraded has two grades. After a failed recovery the state is exact up to the cursor: the
//     next successful recovery from the cursor repairs it. After a reset (gap without source)
//     blocks stored before are missing: only a Cleared or a TreeDump repairs it, so every
//     recovery of such a rank, follow-ups included, is a full restore; SetHasSource(true) and
//     RequestRestore start one at once.
//   - Cleared is rank-scoped (SPEC §3). Options.WorkerWideClear switches to Dynamo's
//     worker-wide clear: a Cleared sets InvalidateSiblings, and Invalidate resets a sibling and
//     puts its cursor to InvalidatedByBarrier(last): ids ≤ last stay stale, the next higher id
//     is applied without recovering pre-barrier gaps.
//   - An Events answer: events before its last Cleared are skipped (the Cleared erases them);
//     ids ≤ cursor are skipped; a hole inside the answer (a server bug) stops the apply there
//     and the drain fetches again; an answer that makes no progress while events are pending
//     counts as failed (ErrBadAnswer), so a broken upstream cannot loop the rank.
//
// Invariants (checked by the tests): the cursor never moves while a recovery is in flight;
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
