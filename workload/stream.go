package workload

import (
	"fmt"

	"github.com/kvindex/kvindex/event"
)

// A Stream is the workload Generate returns, produced chunk by chunk instead of held whole, for
// fleet-scale benchmarks (`kvindex bench --scale 640`: 11 M events naming 199 M blocks; Generate
// holds them, ~5 GB, and the simulation of every copy, 13.7 GB). It holds copy 0's workload only
// and derives every other copy from it:
//
//   - The k copies of a scaled trace route alike (see the generator's decisions and
//     TestGenerateCopiesRouteAlike): copy c's events are copy 0's with worker ids shifted by
//     c·Workers, tokens hashes by c·ScaleOffset and block hashes re-chained from those (a block
//     hash is the chain of its prompt prefix, docs/API.md). So the simulation runs once, at scale
//     1, whatever the scale.
//   - Block hashes are translated through a table built once: every block copy 0 stores is a
//     node (its tokens hash, its parent node), and node n's block hash in copy c is
//     table[n·copies + c] — 8 bytes per distinct block of the trace per copy (182,790 blocks
//     for the conversation trace: 1.5 MB a copy, 0.94 GB at scale 640), against ~160 heap bytes
//     per cached block for simulating every copy (13.7 GB at scale 640, 1.7 GB at scale 80).
//   - The global order is Generate's: request by request in timestamp order, copy 0 … k−1 of
//     each, a request's query before its events. Query q of the stream is request q / k of copy
//     q % k, so queries are addressed directly (Query), without producing events.
//
// Chunks (StreamReader.Next) are fresh memory, never written again by the stream: a caller may
// keep or modify them. Copy 0's own events are shared with the base workload (as Generate's
// are with its caller); a scale-1 stream is that workload, chunk by chunk. The same inputs give
// the same stream, event for event (TestStreamEqualsGenerate).
//
// A Stream is read-only after NewStream and safe for concurrent use; each StreamReader is not.
type Stream struct {
	base    *Workload
	copies  int
	workers uint64 // worker ids per copy (WorkloadOptions.Workers); 0 for a stream of a workload
	// per base event, its blocks' nodes (Stored) or its named blocks' nodes (Removed), and its
	// parent's node (−1: the root), laid out flat: refs[evRef[i]:evRef[i+1]].
	refs   []int32
	evRef  []int32
	parent []int32
	table  []uint64 // node·copies + c → block hash in copy c
	// nonEmpty lists the base queries that name blocks.
	nonEmpty []int32
	blocks   int
	maxWID   uint64
}

// NewStream is Generate(reqs, scale, opts) as a Stream: the simulation of copy 0, then the hash
// table of the other copies. It fails as Generate does (ErrBadOptions, ErrScale), and with
// ErrGenerate if copy 0's stream names a block it never stored (a bug).
func NewStream(reqs []Request, scale int, opts WorkloadOptions) (*Stream, error) {
	if err := checkScale(reqs, scale); err != nil {
		return nil, err
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	base, err := Generate(reqs, 1, o)
	if err != nil {
		return nil, err
	}
	s := &Stream{base: base, copies: scale, workers: uint64(o.Workers)}
	if err := s.index(); err != nil {
		return nil, err
	}
	return s, nil
}

// StreamOf is a scale-1 stream over an already materialized workload (one read from a workload
// dir): its chunks share wl's events.
func StreamOf(wl *Workload) *Stream {
	s := &Stream{base: wl, copies: 1}
	for i := range wl.Queries {
		if len(wl.Queries[i].BlockHashes) > 0 {
			s.nonEmpty = append(s.nonEmpty, int32(i))
		}
	}
	s.blocks = wl.Blocks
	for i := range wl.Events {
		s.maxWID = max(s.maxWID, wl.Events[i].WorkerID)
	}
	return s
}

// index builds the node table from copy 0's events and checks that it reproduces them.
func (s *Stream) index() error {
	evs := s.base.Events
	node := make(map[uint64]int32)
	var tokens []uint64
	var up []int32 // node → parent node (−1: root)
	lookup := func(i int, h uint64) (int32, error) {
		n, ok := node[h]
		if !ok {
			return 0, fmt.Errorf("%w: event %d names block %d before any Stored", ErrGenerate, i, h)
		}
		return n, nil
	}
	s.evRef = make([]int32, 0, len(evs)+1)
	s.parent = make([]int32, len(evs))
	for i := range evs {
		ev := &evs[i]
		s.evRef = append(s.evRef, int32(len(s.refs)))
		s.maxWID = max(s.maxWID, ev.WorkerID)
		s.parent[i] = -1
		switch ev.Kind {
		case event.KindStored:
			prev := int32(-1)
			if ev.HasParent {
				n, err := lookup(i, ev.ParentHash)
				if err != nil {
					return err
				}
				prev = n
			}
			s.parent[i] = prev
			for _, b := range ev.Blocks {
				n, ok := node[b.BlockHash]
				if !ok {
					n = int32(len(tokens))
					node[b.BlockHash] = n
					tokens = append(tokens, b.TokensHash)
					up = append(up, prev)
				} else if up[n] != prev || tokens[n] != b.TokensHash {
					return fmt.Errorf("%w: event %d stores block %d under another parent or tokens hash", ErrGenerate, i, b.BlockHash)
				}
				s.refs = append(s.refs, n)
				prev = n
			}
		case event.KindRemoved:
			for _, h := range ev.Removed {
				n, err := lookup(i, h)
				if err != nil {
					return err
				}
				s.refs = append(s.refs, n)
			}
		}
		s.blocks += ev.NumBlocks()
	}
	s.evRef = append(s.evRef, int32(len(s.refs)))
	for i := range s.base.Queries {
		if len(s.base.Queries[i].BlockHashes) > 0 {
			s.nonEmpty = append(s.nonEmpty, int32(i))
		}
	}
	if s.copies > 1 && len(evs) > 0 {
		s.maxWID += uint64(s.copies-1) * s.workers
	}

	k := s.copies
	s.table = make([]uint64, len(tokens)*k)
	for n := range tokens {
		for c := range k {
			local := tokens[n] + uint64(c)*ScaleOffset
			h := local // a prompt's first block: its block hash is its tokens hash
			if p := up[n]; p >= 0 {
				h = event.NextSequenceHash(s.table[int(p)*k+c], local)
			}
			s.table[n*k+c] = h
		}
	}
	for h, n := range node { // copy 0 re-chained must be copy 0
		if s.table[int(n)*k] != h {
			return fmt.Errorf("%w: block %d re-chains to %d", ErrGenerate, h, s.table[int(n)*k])
		}
	}
	return nil
}

// Copies is the number of trace copies (the scale).
func (s *Stream) Copies() int { return s.copies }

// Events is the number of events of the stream: len(Generate(…).Events).
func (s *Stream) Events() int { return len(s.base.Events) * s.copies }

// Blocks is the number of blocks named in the stream's events (Workload.Blocks).
func (s *Stream) Blocks() int { return s.blocks * s.copies }

// Queries is the number of queries of the stream, empty ones included.
func (s *Stream) Queries() int { return len(s.base.Queries) * s.copies }

// NonEmptyQueries is the number of queries that name at least one block.
func (s *Stream) NonEmptyQueries() int { return len(s.nonEmpty) * s.copies }

// NonEmpty returns the stream index of the j-th query that names blocks (0 ≤ j <
// NonEmptyQueries), for Query.
func (s *Stream) NonEmpty(j int) int {
	i, c := j/s.copies, j%s.copies
	return int(s.nonEmpty[i])*s.copies + c
}

// RoutingHitRatio is Workload.RoutingHitRatio: the copies route alike, so it is copy 0's.
func (s *Stream) RoutingHitRatio() float64 { return s.base.RoutingHitRatio }

// MaxWorkerID is the largest worker id of the stream's events (0 for an empty stream).
func (s *Stream) MaxWorkerID() uint64 { return s.maxWID }

// Query returns query q of the stream (0 ≤ q < Queries()), as Generate's Queries[q]. Its
// BlockHashes are fresh for copies other than 0 and shared with the base workload for copy 0:
// never write them.
func (s *Stream) Query(q int) Query {
	i, c := q/s.copies, q%s.copies
	bq := s.base.Queries[i]
	if s.copies == 1 {
		return bq
	}
	// Events before request i, all copies, then copy 0 … c−1 of request i's own.
	own := s.requestEnd(i) - bq.AfterEvent
	out := Query{AfterEvent: bq.AfterEvent*s.copies + c*own, Worker: bq.Worker, Hit: bq.Hit}
	if c == 0 {
		out.BlockHashes = bq.BlockHashes
	} else {
		out.BlockHashes = make([]uint64, len(bq.BlockHashes))
		for j, h := range bq.BlockHashes {
			out.BlockHashes[j] = h + uint64(c)*ScaleOffset
		}
	}
	if bq.Worker >= 0 {
		out.Worker = bq.Worker + c*int(s.workers)
	}
	return out
}

// requestEnd is the index in the base stream past request i's events.
func (s *Stream) requestEnd(i int) int {
	if i+1 < len(s.base.Queries) {
		return s.base.Queries[i+1].AfterEvent
	}
	return len(s.base.Events)
}

// Reader returns a reader at the start of the stream.
func (s *Stream) Reader() *StreamReader { return &StreamReader{s: s} }

// A StreamReader produces a Stream's events and queries in order, one chunk at a time.
type StreamReader struct {
	s      *Stream
	req, c int // the next request and copy (scale > 1); for scale 1, req is the next event
	events int // events produced so far
	q      int // queries produced so far
}

// Chunk is one run of a stream: events FirstEvent… and the queries asked among them (their
// AfterEvent counts from the start of the stream).
type Chunk struct {
	FirstEvent int
	Events     []event.RouterEvent
	Queries    []Query
}

// Next returns the next chunk: whole (request, copy) units until at least maxEvents events
// (at least one unit), with their queries; ok is false at the end of the stream. With wantQueries
// false the chunk holds no queries (cheaper when only the events are driven).
func (r *StreamReader) Next(maxEvents int, wantQueries bool) (ch Chunk, ok bool) {
	s := r.s
	ch.FirstEvent = r.events
	if s.copies == 1 {
		return r.nextScale1(maxEvents, wantQueries)
	}
	base := s.base
	if r.req >= len(base.Queries) {
		return ch, false
	}
	k := s.copies
	// Size the chunk first, so that its events, blocks and hashes are three allocations.
	nev, nblk, nrm := 0, 0, 0
	for req, c := r.req, r.c; req < len(base.Queries); {
		lo, hi := base.Queries[req].AfterEvent, s.requestEnd(req)
		nev += hi - lo
		for i := lo; i < hi; i++ {
			if base.Events[i].Kind == event.KindStored {
				nblk += len(base.Events[i].Blocks)
			} else {
				nrm += len(base.Events[i].Removed)
			}
		}
		if c++; c == k {
			req, c = req+1, 0
		}
		if nev >= maxEvents {
			break
		}
	}
	ch.Events = make([]event.RouterEvent, 0, nev)
	blocks := make([]event.Block, 0, nblk)
	removed := make([]uint64, 0, nrm)
	for r.req < len(base.Queries) {
		if wantQueries {
			ch.Queries = append(ch.Queries, s.Query(r.req*k+r.c))
		}
		lo, hi := base.Queries[r.req].AfterEvent, s.requestEnd(r.req)
		for i := lo; i < hi; i++ {
			ev := base.Events[i] // a copy; its slices are replaced below
			ev.WorkerID += uint64(r.c) * s.workers
			refs := s.refs[s.evRef[i]:s.evRef[i+1]]
			off := uint64(r.c) * ScaleOffset
			if p := s.parent[i]; p >= 0 {
				ev.ParentHash = s.table[int(p)*k+r.c]
			}
			switch ev.Kind {
			case event.KindStored:
				start := len(blocks)
				for j, n := range refs {
					blocks = append(blocks, event.Block{BlockHash: s.table[int(n)*k+r.c], TokensHash: base.Events[i].Blocks[j].TokensHash + off})
				}
				ev.Blocks = blocks[start:len(blocks):len(blocks)]
			case event.KindRemoved:
				start := len(removed)
				for _, n := range refs {
					removed = append(removed, s.table[int(n)*k+r.c])
				}
				ev.Removed = removed[start:len(removed):len(removed)]
			}
			ch.Events = append(ch.Events, ev)
		}
		r.q++
		if r.c++; r.c == k {
			r.req, r.c = r.req+1, 0
		}
		if len(ch.Events) >= maxEvents {
			break
		}
	}
	r.events += len(ch.Events)
	return ch, true
}

// nextScale1 slices the base workload: events in runs of maxEvents, each with the queries
// asked before its end.
func (r *StreamReader) nextScale1(maxEvents int, wantQueries bool) (Chunk, bool) {
	base := r.s.base
	if r.events >= len(base.Events) && r.q >= len(base.Queries) {
		return Chunk{}, false
	}
	ch := Chunk{FirstEvent: r.events}
	end := min(r.events+max(maxEvents, 1), len(base.Events))
	ch.Events = base.Events[r.events:end:end]
	last := end == len(base.Events)
	for ; r.q < len(base.Queries) && (base.Queries[r.q].AfterEvent < end || last); r.q++ {
		if wantQueries {
			ch.Queries = append(ch.Queries, base.Queries[r.q])
		}
	}
	r.events = end
	return ch, true
}
