package lanes

import (
	"context"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/recovery"
)

// Install replaces a rank's whole state, durably, with a dump of its tree as of event id last:
// the Stored events of a peer's dump (replay order) become the rank's snapshot, its cursor is
// Live(last), its buffered events and recovery in flight are dropped, and meta is written in the
// same log batch. It is the TreeDump install of a full restore, for a caller that fetched the dump
// itself (a replica bootstrapping from a peer): later events of the rank continue from last+1.
// The rank is registered and listed (this is a write). It returns once the batch is durable and
// applied.
func (p *Pipeline) Install(ctx context.Context, r event.Rank, dump []event.RouterEvent, last uint64, meta ...Meta) error {
	w := &waiter{}
	w.wg.Add(1)
	if err := p.enqueue(ctx, p.register(r).lane, &op{kind: opInstall, rank: r, events: dump, token: last, meta: meta, w: w}); err != nil {
		return err
	}
	w.wg.Wait()
	return w.firstErr
}

// install runs an Install on the rank's lane, the pipeline drained: the rank's Machine is
// replaced by one at Live(last), and the install is carried out by execute like a TreeDump answer.
func (ln *lane) install(o *op) {
	if err := ln.failure(); err != nil {
		o.w.finish(Result{}, 0, err)
		return
	}
	p := ln.p
	rs := p.register(o.rank)
	bs := ln.newBatchState()
	for _, m := range o.meta {
		bs.b.SetMeta(m.Name, m.Value)
	}
	rs.mu.Lock()
	bs.touch(rs)
	if rs.cancel != nil {
		rs.cancel()
		rs.cancel = nil
	}
	rs.st = recovery.Restore(rs.rank, recovery.LiveCursor(o.token), false, nil, recovery.Options{HasSource: p.hasSource(rs.rank.WorkerID)})
	d := recovery.Decision{Replace: &recovery.Dump{Events: o.events, LastEventID: o.token}, PendingChanged: true, PendingEmpty: true}
	ln.execute(rs, d, nil, bs)
	rs.seen, rs.removed = true, false
	rs.mu.Unlock()
	ln.launch(&pending{bs: bs, ops: []*op{o}, results: []Result{{Accepted: len(o.events)}}})
}
