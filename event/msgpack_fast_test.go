package event

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// mpGen writes msgpack the many ways a client may: integers in any width that holds them (signed
// codes too), keys as str or bin, keys in any order, optional fields absent or nil, and unknown
// fields with arbitrary values.
type mpGen struct {
	rnd *rand.Rand
	buf bytes.Buffer
	e   *msgpack.Encoder
}

func newMPGen(seed uint64) *mpGen {
	g := &mpGen{rnd: rand.New(rand.NewPCG(seed, seed^0x5bd1e995))}
	g.e = msgpack.NewEncoder(&g.buf)
	return g
}

func (g *mpGen) must(err error) {
	if err != nil {
		panic(err)
	}
}

// uint writes v in a randomly chosen code that holds it.
func (g *mpGen) uint(v uint64) {
	var opts []func() error
	if v <= 0x7f {
		opts = append(opts, func() error { return g.e.EncodeUint(v) }) // compact: fixint
	}
	if v <= math.MaxUint8 {
		opts = append(opts, func() error { return g.e.EncodeUint8(uint8(v)) })
	}
	if v <= math.MaxUint16 {
		opts = append(opts, func() error { return g.e.EncodeUint16(uint16(v)) })
	}
	if v <= math.MaxUint32 {
		opts = append(opts, func() error { return g.e.EncodeUint32(uint32(v)) })
	}
	opts = append(opts, func() error { return g.e.EncodeUint64(v) })
	if v <= math.MaxInt8 {
		opts = append(opts, func() error { return g.e.EncodeInt8(int8(v)) })
	}
	if v <= math.MaxInt16 {
		opts = append(opts, func() error { return g.e.EncodeInt16(int16(v)) })
	}
	if v <= math.MaxInt32 {
		opts = append(opts, func() error { return g.e.EncodeInt32(int32(v)) })
	}
	if v <= math.MaxInt64 {
		opts = append(opts, func() error { return g.e.EncodeInt64(int64(v)) })
	}
	g.must(opts[g.rnd.IntN(len(opts))]())
}

func (g *mpGen) key(k string) {
	if g.rnd.IntN(4) == 0 {
		g.must(g.e.EncodeBytes([]byte(k)))
		return
	}
	g.must(g.e.EncodeString(k))
}

// junk writes an arbitrary value the generic decoder reads (no extension types).
func (g *mpGen) junk(depth int) {
	switch n := g.rnd.IntN(9); {
	case n == 0:
		g.must(g.e.EncodeNil())
	case n == 1:
		g.must(g.e.EncodeBool(g.rnd.IntN(2) == 0))
	case n == 2:
		g.must(g.e.EncodeInt(-g.rnd.Int64N(1 << 40)))
	case n == 3:
		g.must(g.e.EncodeFloat64(g.rnd.Float64()))
	case n == 4:
		g.must(g.e.EncodeFloat32(g.rnd.Float32()))
	case n == 5:
		g.must(g.e.EncodeBytes([]byte("bin")))
	case n == 6 && depth < 3:
		k := g.rnd.IntN(3)
		g.must(g.e.EncodeArrayLen(k))
		for range k {
			g.junk(depth + 1)
		}
	case n == 7 && depth < 3:
		k := g.rnd.IntN(3)
		g.must(g.e.EncodeMapLen(k))
		for i := range k {
			g.key(string(rune('a' + i)))
			g.junk(depth + 1)
		}
	default:
		g.must(g.e.EncodeString("junk"))
	}
}

// fields writes a map of the given fields in random order, with up to two unknown fields.
func (g *mpGen) fields(fs map[string]func()) {
	keys := make([]string, 0, len(fs)+2)
	for k := range fs {
		keys = append(keys, k)
	}
	for i := range g.rnd.IntN(3) {
		keys = append(keys, "x_unknown_"+string(rune('a'+i)))
	}
	g.rnd.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	g.must(g.e.EncodeMapLen(len(keys)))
	for _, k := range keys {
		g.key(k)
		if f, ok := fs[k]; ok {
			f()
		} else {
			g.junk(0)
		}
	}
}

func (g *mpGen) u64() uint64 {
	switch g.rnd.IntN(4) {
	case 0:
		return g.rnd.Uint64N(128)
	case 1:
		return g.rnd.Uint64N(1 << 16)
	case 2:
		return g.rnd.Uint64N(1 << 32)
	}
	return g.rnd.Uint64()
}

// event writes a random valid event and returns what it must decode to.
func (g *mpGen) event() RouterEvent {
	ev := RouterEvent{WorkerID: g.u64(), EventID: g.u64(), DPRank: uint32(g.u64())}
	ev.Kind = Kind(1 + g.rnd.IntN(3))
	top := map[string]func(){"worker_id": func() { g.uint(ev.WorkerID) }}
	switch g.rnd.IntN(3) {
	case 0:
		ev.Tier = Tier(g.rnd.IntN(len(tierNames)))
		top["storage_tier"] = func() { g.must(g.e.EncodeString(ev.Tier.String())) }
	case 1:
		top["storage_tier"] = func() { g.must(g.e.EncodeNil()) }
	}
	body := map[string]func(){"event_id": func() { g.uint(ev.EventID) }}
	switch g.rnd.IntN(3) {
	case 0:
		body["dp_rank"] = func() { g.uint(uint64(ev.DPRank)) }
	case 1:
		ev.DPRank = 0
		body["dp_rank"] = func() { g.must(g.e.EncodeNil()) }
	default:
		ev.DPRank = 0
	}
	switch ev.Kind {
	case KindCleared:
		if g.rnd.IntN(2) == 0 {
			body["data"] = func() { g.must(g.e.EncodeString("cleared")) }
		} else {
			body["data"] = func() { g.must(g.e.EncodeMapLen(1)); g.key("cleared"); g.junk(0) }
		}
	case KindStored:
		ev.Blocks = make([]Block, g.rnd.IntN(5))
		for i := range ev.Blocks {
			ev.Blocks[i] = Block{BlockHash: g.u64(), TokensHash: g.u64()}
		}
		st := map[string]func(){"blocks": func() {
			g.must(g.e.EncodeArrayLen(len(ev.Blocks)))
			for _, b := range ev.Blocks {
				g.fields(map[string]func(){"block_hash": func() { g.uint(b.BlockHash) }, "tokens_hash": func() { g.uint(b.TokensHash) }})
			}
		}}
		switch g.rnd.IntN(3) {
		case 0:
			ev.HasParent, ev.ParentHash = true, g.u64()
			st["parent_hash"] = func() { g.uint(ev.ParentHash) }
		case 1:
			st["parent_hash"] = func() { g.must(g.e.EncodeNil()) }
		}
		body["data"] = func() { g.must(g.e.EncodeMapLen(1)); g.key("stored"); g.fields(st) }
	case KindRemoved:
		ev.Removed = make([]uint64, g.rnd.IntN(5))
		for i := range ev.Removed {
			ev.Removed[i] = g.u64()
		}
		body["data"] = func() {
			g.must(g.e.EncodeMapLen(1))
			g.key("removed")
			g.fields(map[string]func(){"block_hashes": func() {
				g.must(g.e.EncodeArrayLen(len(ev.Removed)))
				for _, h := range ev.Removed {
					g.uint(h)
				}
			}})
		}
	}
	top["event"] = func() { g.fields(body) }
	g.fields(top)
	return ev
}

// batch writes a random valid batch and returns its bytes and its events.
func (g *mpGen) batch() ([]byte, []RouterEvent) {
	g.buf.Reset()
	evs := make([]RouterEvent, g.rnd.IntN(6))
	g.must(g.e.EncodeArrayLen(len(evs)))
	for i := range evs {
		evs[i] = g.event()
	}
	return bytes.Clone(g.buf.Bytes()), evs
}

// checkFastAgrees is the rule both decoders must keep: whatever the fast path accepts, the
// checked decoder accepts too, with the same events.
func checkFastAgrees(t *testing.T, data []byte) (fastOK bool) {
	t.Helper()
	fast, ok := decodeMsgpackFast(data)
	if !ok {
		return false
	}
	checked, err := decodeMsgpackChecked(data)
	if err != nil {
		t.Fatalf("fast path accepted % x, which the checked decoder refuses: %v", data, err)
	}
	if !reflect.DeepEqual(fast, checked) {
		t.Fatalf("body % x: fast %+v, checked %+v", data, fast, checked)
	}
	return true
}

// TestMsgpackFastPathDecodesEveryValidEncodingLikeTheChecked: on valid bodies written every way a
// client may (any integer width, bin keys, key order, nil optionals, unknown fields), the fast
// path accepts and decodes exactly the events the checked decoder does; and on mutations of those
// bodies it never accepts what the checked decoder refuses, nor decodes something else.
func TestMsgpackFastPathDecodesEveryValidEncodingLikeTheChecked(t *testing.T) {
	g := newMPGen(17)
	mut := rand.New(rand.NewPCG(5, 17))
	accepted, refusedMutants, acceptedMutants := 0, 0, 0
	for range 3000 {
		body, want := g.batch()
		if !checkFastAgrees(t, body) {
			t.Fatalf("fast path refused the valid body % x (%+v)", body, want)
		}
		got, err := DecodeMsgpackBatch(body)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded %+v, %v; want %+v", got, err, want)
		}
		accepted++
		for range 4 {
			m := bytes.Clone(body)
			switch mut.IntN(3) {
			case 0:
				if len(m) > 0 {
					m[mut.IntN(len(m))] = byte(mut.Uint32())
				}
			case 1:
				m = m[:mut.IntN(len(m)+1)]
			default:
				i := mut.IntN(len(m) + 1)
				m = append(m[:i:i], append([]byte{byte(mut.Uint32())}, body[i:]...)...)
			}
			if checkFastAgrees(t, m) {
				acceptedMutants++
			} else {
				refusedMutants++
			}
		}
	}
	t.Logf("%d valid bodies; mutants: %d accepted (agreeing), %d refused", accepted, acceptedMutants, refusedMutants)
}

// TestMsgpackFastPathLeavesEdgeCasesToTheChecked: bodies the checked decoder accepts but the fast
// path refuses (a repeated key, where the last one wins; an extension value in an unknown field)
// still decode, through the checked decoder, to its answer; and invalid bodies are refused with
// the checked decoder's sentinel.
func TestMsgpackFastPathLeavesEdgeCasesToTheChecked(t *testing.T) {
	enc := func(f func(e *msgpack.Encoder) error) []byte {
		var b bytes.Buffer
		if err := f(msgpack.NewEncoder(&b)); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	cleared := func(e *msgpack.Encoder) error {
		_ = e.EncodeMapLen(2)
		_ = e.EncodeString("event_id")
		_ = e.EncodeUint(9)
		_ = e.EncodeString("data")
		return e.EncodeString("cleared")
	}
	repeated := enc(func(e *msgpack.Encoder) error {
		_ = e.EncodeArrayLen(1)
		_ = e.EncodeMapLen(3)
		_ = e.EncodeString("worker_id")
		_ = e.EncodeUint(1)
		_ = e.EncodeString("worker_id")
		_ = e.EncodeUint(2)
		_ = e.EncodeString("event")
		return cleared(e)
	})
	withExt := enc(func(e *msgpack.Encoder) error {
		_ = e.EncodeArrayLen(1)
		_ = e.EncodeMapLen(3)
		_ = e.EncodeString("worker_id")
		_ = e.EncodeUint(2)
		_ = e.EncodeString("when")
		_ = e.Encode(time.Unix(1, 0).UTC())
		_ = e.EncodeString("event")
		return cleared(e)
	})
	for name, body := range map[string][]byte{"repeated key": repeated, "extension value": withExt} {
		if _, ok := decodeMsgpackFast(body); ok {
			t.Fatalf("%s: the fast path accepted it", name)
		}
		got, err := DecodeMsgpackBatch(body)
		if err != nil || !reflect.DeepEqual(got, []RouterEvent{{WorkerID: 2, EventID: 9, Kind: KindCleared}}) {
			t.Fatalf("%s: %+v, %v; want worker 2, event 9, cleared", name, got, err)
		}
	}
	for name, body := range map[string][]byte{
		"trailing bytes": append(enc(func(e *msgpack.Encoder) error { return e.EncodeArrayLen(0) }), 0x01),
		"header claims more events than the body holds": {0xdd, 0x7f, 0xff, 0xff, 0xff},
		"nil batch": {0xc0},
	} {
		if _, ok := decodeMsgpackFast(body); ok {
			t.Fatalf("%s: the fast path accepted it", name)
		}
		var de *DecodeError
		if _, err := DecodeMsgpackBatch(body); !errors.As(err, &de) || !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s: %v, want a *DecodeError wrapping ErrMalformed", name, err)
		}
	}
}

// TestMsgpackKeysInOnePass: on bodies written every way a client may (unknown fields among
// them), DecodeMsgpackBatchKeys reports the unknown fields CheckKeysMsgpack reports, in the same
// order, without a second walk; a group given as nil is no unknown field.
func TestMsgpackKeysInOnePass(t *testing.T) {
	g := newMPGen(29)
	reported := 0
	for range 300 {
		body, _ := g.batch()
		cb, want := recorder()
		checked, err := decodeMsgpackChecked(body)
		if err == nil {
			err = CheckKeysMsgpack(body, cb)
		}
		sameAsTwoPasses(t, body, DecodeMsgpackBatchKeys, checked, err, *want)
		reported += len(*want)
	}
	if reported == 0 {
		t.Fatal("the generator wrote no unknown field: the test checks nothing")
	}
	withGroup := encodeGeneric(t, []any{map[string]any{"worker_id": 1, "event": map[string]any{"event_id": 2, "group": nil, "data": "cleared"}}})
	r := mpReader{b: withGroup, rec: true}
	if _, ok := r.batch(); !ok || len(r.unknown) != 0 {
		t.Fatalf("a nil group: fast path ok=%v, unknown fields %v", ok, r.unknown)
	}
}
