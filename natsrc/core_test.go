package natsrc_test

import (
	"bufio"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/natsrc"
	"github.com/kvindex/kvindex/server"
	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

var update = flag.Bool("update", false, "rewrite testdata/envelopes.golden")

// Dynamo's msgpack EventEnvelopes (testdata/envelopes.hex, written by gen_envelopes.py with its
// own msgpack writer) decode to the envelope fields and RouterEvents of envelopes.golden: a
// payload as bin or as an array of u8, one event or a batch.
func TestCoreGoldenEnvelopesDecode(t *testing.T) {
	f, err := os.Open("testdata/envelopes.hex")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		b, err := hex.DecodeString(line)
		if err != nil {
			t.Fatal(err)
		}
		env, evs, err := natsrc.DecodeEnvelope(b)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		fmt.Fprintf(&out, "publisher_id=%d sequence=%d published_at=%d topic=%s\n", env.PublisherID, env.Sequence, env.PublishedAt, env.Topic)
		for i := range evs {
			out.Write(event.AppendJSON(nil, &evs[i]))
			out.WriteByte('\n')
		}
	}
	if *update {
		if err := os.WriteFile("testdata/envelopes.golden", []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/envelopes.golden")
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Fatalf("decoded:\n%s\nwant (testdata/envelopes.golden):\n%s", out.String(), want)
	}
	for _, bad := range [][]byte{{0xc0}, {0x81, 0xa1, 'x', 0x01}, mustEnvelope(t, 1, 1, []byte{0x01})} {
		if _, _, err := natsrc.DecodeEnvelope(bad); err == nil {
			t.Errorf("%x decoded without error", bad)
		}
	}
}

func mustEnvelope(t *testing.T, publisher, seq uint64, payload []byte) []byte {
	t.Helper()
	b, err := msgpack.Marshal(&natsrc.Envelope{PublisherID: publisher, Sequence: seq, PublishedAt: uint64(time.Now().UnixMilli()),
		Topic: "kv-events", Payload: mustBin(t, payload)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustBin(t *testing.T, payload []byte) msgpack.RawMessage {
	t.Helper()
	b, err := msgpack.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func envelopeOf(t *testing.T, publisher, seq uint64, ev event.RouterEvent) []byte {
	t.Helper()
	batch, err := event.AppendMsgpackBatch(nil, []event.RouterEvent{ev})
	if err != nil {
		t.Fatal(err)
	}
	return mustEnvelope(t, publisher, seq, batch[1:]) // one event, not a batch of one
}

// A publisher's sequence that skips (message 3 never arrives) is a gap: the source counts it
// and the message lost, and the rank whose event it carried shows the loss in its ledger when
// its next event arrives (no recovery source: recorded lost, rank reset and degraded).
func TestCoreSkippedSequenceIsRecordedAsAGap(t *testing.T) {
	ns := startNATS(t, t.TempDir(), 0)
	const subject = "namespace.dynamo.component.backend.kv-events"
	r := openReplica(t, nil, server.Config{NATS: []string{ns.ClientURL() + "?subject=" + subject}})
	var id string
	deadline := time.Now().Add(10 * time.Second)
	for id == "" || r.source(id).State != natsrc.StateConnected {
		if time.Now().After(deadline) {
			t.Fatal("the nats source never subscribed")
		}
		_, _, b := r.get("/v1/sources")
		if i := strings.Index(string(b), `"id":"nats-`); i >= 0 {
			id = string(b[i+6 : i+6+len("nats-")+16])
		}
		time.Sleep(10 * time.Millisecond)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rk := event.Rank{WorkerID: 7}
	parent := uint64(1001)
	evs := []event.RouterEvent{
		event.Stored(rk, 1, nil, event.Block{BlockHash: 1001, TokensHash: 11}),
		event.Stored(rk, 2, &parent, event.Block{BlockHash: 1002, TokensHash: 12}),
		event.Removed(rk, 3, 1002), // sequence 3: never published
		event.Stored(rk, 4, &parent, event.Block{BlockHash: 1003, TokensHash: 13}),
	}
	for i, ev := range evs {
		if i == 2 {
			continue
		}
		if err := nc.Publish(subject, envelopeOf(t, 55, uint64(i+1), ev)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Publish(subject, envelopeOf(t, 55, 2, evs[1])); err != nil { // a repeated sequence
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var st natsrc.Status
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st = r.source(id); st.Messages+st.Duplicates >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("source: %+v", st)
		}
	}
	if st.Gaps != 1 || st.Lost != 1 || st.Duplicates != 1 || st.Messages != 3 || st.Publishers != 1 {
		t.Fatalf("source counters: %+v", st)
	}
	rs, ok := r.srv.Engine().RankStatus(rk)
	if !ok || rs.Last != 4 || rs.Lost != 1 || !rs.Degraded {
		t.Fatalf("rank after the gap: %+v", rs)
	}
}
