package natsrc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/server"
	"github.com/nats-io/nats.go/jetstream"
)

const stream = "namespace-dynamo-component-backend-kv-events"

func jsFlag(url, durable string, extra string) server.Config {
	return server.Config{JetStream: []string{url + "?stream=" + stream + "&durable=" + durable + extra}}
}

const sourceID = "js-" + stream

// A replica killed mid-burst (its data dir as a crash leaves it: only what was synced) and
// reopened with the same durable consumer ends with the same ranks, cursors, ledgers, epochs and
// dump as a replica that never crashed, and scores equal to the model: nothing lost, nothing
// applied twice — although the NATS server's view of the consumer ran ahead of the crashed
// replica's log (the old process kept acking after the crash point).
//
// Seam: a JetStream source into a non-default partition (the "llama" variant) restarts into it.
func TestJetStreamCrashMidBurstLosesNothingAndAppliesNothingTwice(t *testing.T) {
	for _, model := range []string{"", "llama"} {
		t.Run("model="+model, func(t *testing.T) { jetStreamCrashMidBurst(t, model) })
	}
}

func jetStreamCrashMidBurst(t *testing.T, model string) {
	part, extra := "", ""
	if model != "" {
		part, extra = "?model_name="+model, "&model_name="+model
	}
	ns := startNATS(t, t.TempDir(), 0)
	_, js, _ := jsClient(t, ns.ClientURL(), stream)
	ref := openReplica(t, nil, jsFlag(ns.ClientURL(), "ref", extra))
	ref.part = part
	fs := vfs.NewCrashableMem()
	a := openReplica(t, fs, jsFlag(ns.ClientURL(), "a", "&batch=64"+extra))

	w := newWorkload(4, 2)
	done := make(chan uint64)
	batches := make([][]event.RouterEvent, 12)
	for i := range batches {
		batches[i] = w.events(500)
	}
	go func() {
		var last uint64
		for _, evs := range batches {
			l, err := publishErr(js, stream, evs)
			if err != nil {
				t.Error(err)
				break
			}
			last = l
		}
		done <- last
	}()
	// Crash once a share of the burst is applied, while it goes on.
	a.waitSeq(sourceID, 1500, 30*time.Second)
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	a.close()
	last := <-done

	a2 := openReplica(t, crashed, jsFlag(ns.ClientURL(), "a", "&batch=64"+extra))
	a2.part = part
	st := a2.waitSeq(sourceID, last, 30*time.Second)
	ref.waitSeq(sourceID, last, 30*time.Second)
	if st.Lost != 0 || st.Gaps != 0 || st.DecodeErrors != 0 {
		t.Fatalf("restarted replica: %+v", st)
	}
	if got, want := a2.ranksState(true), ref.ranksState(true); got != want {
		t.Fatalf("ranks after the crash:\n%s\nwant (never crashed):\n%s", got, want)
	}
	if !sameLines(a2.dump(), ref.dump()) {
		t.Fatal("dumps differ between the restarted replica and the reference")
	}
	a2.checkScores(w)
	t.Logf("restarted replica resumed at its stored position; skipped %d redelivered messages", st.Duplicates)
}

// Two replicas on one stream converge to identical dumps and the model's scores; after an
// ack-floor purge (the replicas' DoubleAcks make the floor exact), a third replica that starts
// late, with nothing, bootstraps from a peer's dump at the sequence it reflects and ends with
// the same dump while events keep coming.
func TestJetStreamReplicasConvergeAndALateReplicaBootstrapsFromAPeer(t *testing.T) {
	ns := startNATS(t, t.TempDir(), 0)
	_, js, st := jsClient(t, ns.ClientURL(), stream)
	a := openReplica(t, nil, jsFlag(ns.ClientURL(), "a", ""))
	b := openReplica(t, nil, jsFlag(ns.ClientURL(), "b", ""))

	w := newWorkload(8, 2)
	const burst = 6000
	evs := w.events(burst)
	start := time.Now()
	last := publish(t, js, stream, evs)
	a.waitSeq(sourceID, last, 60*time.Second)
	b.waitSeq(sourceID, last, 60*time.Second)
	took := time.Since(start)
	t.Logf("two replicas: %d events from publish to applied on both in %v: %.0f events/s", burst, took.Round(time.Millisecond), burst/took.Seconds())
	if da, db := a.dump(), b.dump(); !sameLines(da, db) {
		t.Fatal("replicas a and b: dumps differ")
	}
	a.checkScores(w)

	// Purge what every consumer acknowledged (Dynamo's purge_acknowledged).
	ctx := context.Background()
	floor := last
	for _, d := range []string{"a", "b"} {
		c, err := js.Consumer(ctx, stream, d)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		floor = min(floor, info.AckFloor.Stream)
	}
	if floor != last {
		t.Fatalf("ack floor %d after every message was applied, want %d (acks not confirmed?)", floor, last)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(floor+1)); err != nil {
		t.Fatal(err)
	}

	// More events while the late replica bootstraps.
	more := w.events(1000)
	go func() {
		if _, err := publishErr(js, stream, more); err != nil {
			t.Error(err)
		}
	}()
	// --peers: the start-up fill of empty partitions leaves this one to the JetStream source,
	// which bootstraps from the same peers with the stream position.
	cc := jsFlag(ns.ClientURL(), "c", "")
	cc.Peers = []string{"http://127.0.0.1:1", a.hs.URL} // the first does not answer
	c := openReplica(t, nil, cc)
	last = publish(t, js, stream, w.events(1000))
	for _, r := range []*replica{a, b, c} {
		r.waitSeq(sourceID, last, 60*time.Second)
	}
	cs := c.source(sourceID)
	if cs.Bootstraps != 1 || cs.Lost != 0 {
		t.Fatalf("late replica: %+v", cs)
	}
	da := a.dump()
	for name, r := range map[string]*replica{"b": b, "c": c} {
		if !sameLines(r.dump(), da) {
			t.Errorf("replica %s: dump differs from a's", name)
		}
	}
	if got, want := c.ranksState(false), a.ranksState(false); got != want {
		t.Errorf("late replica's ranks:\n%s\nwant (a):\n%s", got, want)
	}
	c.checkScores(w)
	b.checkScores(w)
}

// The NATS server restarted under a running replica (same store dir and port): the replica
// reconnects, resumes at its position and applies what was published after the restart.
func TestJetStreamReplicaReconnectsAfterNATSRestart(t *testing.T) {
	dir := t.TempDir()
	ns := startNATS(t, dir, 0)
	url := ns.ClientURL()
	_, js, _ := jsClient(t, url, stream)
	a := openReplica(t, nil, jsFlag(url, "a", ""))
	w := newWorkload(3, 1)
	last := publish(t, js, stream, w.events(300))
	a.waitSeq(sourceID, last, 30*time.Second)

	p := ns.Addr().(*net.TCPAddr).Port
	ns.Shutdown()
	ns.WaitForShutdown()
	ns2 := startNATS(t, dir, p)
	_, js2, _ := jsClient(t, ns2.ClientURL(), stream)
	last = publish(t, js2, stream, w.events(300))
	st := a.waitSeq(sourceID, last, 30*time.Second)
	if st.Reconnects == 0 || st.Lost != 0 {
		t.Fatalf("after the NATS restart: %+v", st)
	}
	a.checkScores(w)
}
