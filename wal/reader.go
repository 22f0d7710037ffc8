package wal

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/store"
)

// Reader is a read handle on the Log for a scan of many ranks in key order: the restart replay,
// one Reader per replay goroutine. It answers RankMeta, ReadSnapshot, Range, Pending, First and
// Last exactly as the Log does (the Log's own methods are a Reader's code), but keeps one Pebble
// iterator open per key prefix it has read and repositions it with SeekGE for each rank, instead
// of opening (and closing) a new iterator, and re-reading its sstables' index blocks, for every
// read. Ranks read in ascending key order make every seek move forward; any order is answered
// correctly, only slower.
//
// It holds its iterators open, against the rule for the live path (STORAGE.md: an open iterator
// pins the memtables and sstables it reads, so a long-lived one keeps flushed memtables in memory
// and compacted sstables on disk): a Reader is for the restart replay only, when no writes run
// but the replay's own (a damaged snapshot's drop and loss record, of a rank already read). Its
// iterators see the log as of their first use: a write made after it is not seen, so read a
// rank once, before writing it. Close releases them.
//
// Not safe for concurrent use: one goroutine owns it.
type Reader struct {
	l      *Log
	its    map[byte]*kept // one per prefix; nil: the Log's one-shot reads
	closed bool
}

// kept is a Reader's iterator over one prefix. When atOK, it is positioned at the first key ≥ at
// (exhausted: there is none): a walk that ended at its span's end leaves it at the next rank's
// first key, so the next rank's seek to a key in [at, that key] is no seek at all (Pebble steps
// instead of seeking only when no Next came between two seeks; a walk's Next always does).
type kept struct {
	it   *pebble.Iterator
	at   []byte
	atOK bool
}

// seekGE positions k's iterator at the first key ≥ key; false when there is none.
func (k *kept) seekGE(key []byte) bool {
	valid := k.it.Valid()
	if !k.atOK || bytes.Compare(k.at, key) > 0 || (valid && bytes.Compare(key, k.it.Key()) > 0) {
		valid = k.it.SeekGE(key)
	}
	k.at, k.atOK = append(k.at[:0], key...), k.it.Error() == nil
	return valid
}

// NewReader returns a Reader on l (see Reader). Close it when the scan is done.
func (l *Log) NewReader() *Reader {
	return &Reader{l: l, its: map[byte]*kept{}}
}

// once returns the Reader behind the Log's own read methods: no iterator is kept, each read opens
// one bounded to the rank's keys and closes it before returning (the live path's rule).
func (l *Log) once() *Reader { return &Reader{l: l} }

// Close releases the Reader's iterators; later reads return ErrClosed. It returns the first
// error an iterator reports on closing.
func (rd *Reader) Close() error {
	rd.closed = true
	var first error
	for p, k := range rd.its {
		if err := k.it.Close(); err != nil && first == nil {
			first = store.MapError("wal: reader", err)
		}
		delete(rd.its, p)
	}
	return first
}

func (rd *Reader) check() error {
	if rd.closed || rd.l.closed.Load() {
		return ErrClosed
	}
	return nil
}

// span is the keys [lo, hi) of one rank under one prefix, as a read walks them: through an
// iterator opened with those bounds (k nil: closed by done), or through the Reader's
// long-lived iterator over the whole prefix (k), seeked to lo and stopped at hi.
type span struct {
	it     *pebble.Iterator
	k      *kept // the Reader's iterator (it), nil when the span opened its own
	lo, hi []byte
}

// span returns the span [lo, hi) (lo[0] is its prefix).
func (rd *Reader) span(lo, hi []byte) (span, error) {
	if rd.its == nil {
		it, err := rd.l.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		return span{it: it, lo: lo, hi: hi}, err
	}
	k, err := rd.iter(lo[0])
	if err != nil {
		return span{}, err
	}
	return span{it: k.it, k: k, lo: lo, hi: hi}, nil
}

// iter returns the Reader's iterator over prefix p, opening it on first use. Its bounds stay
// fixed, so a SeekGE to a key above the previous seek's can step forward instead of seeking.
func (rd *Reader) iter(p byte) (*kept, error) {
	if k := rd.its[p]; k != nil {
		return k, nil
	}
	lo, hi := store.PrefixBounds(p)
	it, err := rd.l.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, err
	}
	k := &kept{it: it}
	rd.its[p] = k
	return k, nil
}

func (s *span) first() bool {
	if s.k == nil {
		return s.it.First()
	}
	return s.k.seekGE(s.lo) && bytes.Compare(s.it.Key(), s.hi) < 0
}

func (s *span) last() bool {
	if s.k == nil {
		return s.it.Last()
	}
	s.k.atOK = false
	return s.it.SeekLT(s.hi) && bytes.Compare(s.it.Key(), s.lo) >= 0
}

func (s *span) next() bool {
	if s.k == nil {
		return s.it.Next()
	}
	if s.it.Next() && bytes.Compare(s.it.Key(), s.hi) < 0 {
		s.k.atOK = false // inside the span: a walk stopped here leaves no known position
		return true
	}
	// At the first key ≥ hi, or past the last key (the previous one was below hi).
	s.k.at, s.k.atOK = append(s.k.at[:0], s.hi...), s.it.Error() == nil
	return false
}

// done ends the walk and returns the iterator's error: an own iterator is closed, the Reader's
// is kept (its next seek clears the error).
func (s *span) done() error {
	if s.k == nil {
		return s.it.Close()
	}
	return s.it.Error()
}

// get returns a copy of key's value; ok false when absent. The Log's one-shot reads use a point
// get; a Reader seeks its iterator of key's prefix.
func (rd *Reader) get(key []byte) ([]byte, bool, error) {
	if rd.its == nil {
		return rd.l.get(key)
	}
	k, err := rd.iter(key[0])
	if err != nil {
		return nil, false, store.MapError("wal: get", err)
	}
	it := k.it
	if !k.seekGE(key) || !bytes.Equal(it.Key(), key) {
		if err := it.Error(); err != nil {
			return nil, false, store.MapError("wal: get", err)
		}
		return nil, false, nil
	}
	v, err := it.ValueAndErr()
	if err != nil {
		return nil, false, store.MapError("wal: get", err)
	}
	return bytes.Clone(v), true, nil
}

// First returns r's oldest retained log event id; 0 when the rank has no retained log events.
func (rd *Reader) First(r event.Rank) (uint64, error) { return rd.edge(r, true) }

// Last returns r's newest log event id; 0 when the rank has no log events.
func (rd *Reader) Last(r event.Rank) (uint64, error) { return rd.edge(r, false) }

func (rd *Reader) edge(r event.Rank, first bool) (uint64, error) {
	if err := rd.check(); err != nil {
		return 0, err
	}
	lo, hi := store.RankLogBounds(r)
	s, err := rd.span(lo, hi)
	if err != nil {
		return 0, store.MapError(fmt.Sprintf("wal: rank %v", r), err)
	}
	var ok bool
	if first {
		ok = s.first()
	} else {
		ok = s.last()
	}
	var id uint64
	if ok {
		_, id, _ = store.ParseLogKey(s.it.Key())
		if first {
			// The first record's first event; a record whose header does not parse counts
			// from its key (its damage is the readers' to report).
			val, err := s.it.ValueAndErr()
			if err != nil {
				_ = s.done()
				return 0, store.MapError(fmt.Sprintf("wal: rank %v", r), err)
			}
			id, _, _ = RecordIDs(s.it.Key(), val)
		}
	}
	if err := s.done(); err != nil {
		return 0, store.MapError(fmt.Sprintf("wal: rank %v", r), err)
	}
	return id, nil
}

// Range calls fn for r's log events with id ≥ fromID in id order, at most limit of them (≤ 0:
// all). See Log.Range.
func (rd *Reader) Range(r event.Rank, fromID uint64, limit int, fn func(ev *event.RouterEvent) error) error {
	if err := rd.check(); err != nil {
		return err
	}
	_, hi := store.RankLogBounds(r)
	s, err := rd.span(store.LogKey(r, fromID), hi)
	if err != nil {
		return store.MapError(fmt.Sprintf("wal: range rank %v", r), err)
	}
	var ev event.RouterEvent
	n := 0
	errLimit := errStopRange
	yield := func(ev *event.RouterEvent) error {
		if limit > 0 && n >= limit {
			return errLimit
		}
		n++
		return fn(ev)
	}
	for valid := s.first(); valid && (limit <= 0 || n < limit); valid = s.next() {
		val, err := s.it.ValueAndErr()
		if err == nil {
			err = DecodeRecords(&ev, s.it.Key(), val, fromID, yield)
		} else {
			err = store.MapError(fmt.Sprintf("wal: range rank %v", r), err)
		}
		if err == errLimit {
			break
		}
		if err != nil {
			_ = s.done()
			return err
		}
	}
	if err := s.done(); err != nil {
		return store.MapError(fmt.Sprintf("wal: range rank %v", r), err)
	}
	return nil
}

// RankMeta returns r's cursor, gap ledger, snapshot id and removal state.
func (rd *Reader) RankMeta(r event.Rank) (RankMeta, error) {
	if err := rd.check(); err != nil {
		return RankMeta{}, err
	}
	var m RankMeta
	// The cursor, snapshot id and log cut are the rank's 'M' keys: one iterator reads them all
	// (a point get each cost a restart's replay more than the rank's tree build).
	s, err := rd.span(store.RankBounds(store.PrefixRankMeta, r))
	if err != nil {
		return m, store.MapError("wal: rank metadata", err)
	}
	for valid := s.first(); valid; valid = s.next() {
		k := s.it.Key()
		if len(k) != store.MetaKeyLen {
			continue
		}
		v, err := s.it.ValueAndErr()
		if err != nil {
			_ = s.done()
			return m, store.MapError("wal: rank metadata", err)
		}
		switch k[len(k)-1] {
		case metaCursor:
			if m.Cursor, err = decodeCursor(r, v); err != nil {
				err = fmt.Errorf("wal: rank %v: %w: %w", r, ErrCorruption, err)
			}
			m.HasCursor = err == nil
		case metaSnapshotID:
			m.SnapshotID, err = metaU64(r, metaSnapshotID, v)
		case metaCut:
			m.Cut, err = metaU64(r, metaCut, v)
		}
		if err != nil {
			_ = s.done()
			return m, err
		}
	}
	if err := s.done(); err != nil {
		return m, store.MapError("wal: rank metadata", err)
	}
	_, tomb, err := rd.get(store.RankKey(store.PrefixTombstone, r))
	if err != nil {
		return m, err
	}
	if tomb && !m.HasCursor {
		_, snap, err := rd.get(store.RankKey(store.PrefixSnapshot, r))
		if err != nil {
			return m, err
		}
		last, err := rd.Last(r)
		if err != nil {
			return m, err
		}
		m.Removed = !snap && last == 0
	}
	if s, err = rd.span(store.RankBounds(store.PrefixGap, r)); err != nil {
		return m, store.MapError("wal: gaps", err)
	}
	for valid := s.first(); valid; valid = s.next() {
		val, err := s.it.ValueAndErr()
		var g Gap
		if err == nil {
			g, err = decodeGap(r, val)
			if err != nil {
				err = fmt.Errorf("wal: rank %v: %w: %w", r, ErrCorruption, err)
			}
		}
		if err != nil {
			_ = s.done()
			return m, err
		}
		m.Gaps = append(m.Gaps, g)
	}
	if err := s.done(); err != nil {
		return m, store.MapError("wal: gaps", err)
	}
	return m, nil
}

// ReadSnapshot returns r's snapshot; ok false when it has none. See Log.ReadSnapshot.
func (rd *Reader) ReadSnapshot(r event.Rank) (Snapshot, bool, error) {
	if err := rd.check(); err != nil {
		return Snapshot{}, false, err
	}
	v, ok, err := rd.get(store.RankKey(store.PrefixSnapshot, r))
	if err != nil || !ok {
		return Snapshot{}, false, err
	}
	s, err := decodeSnapshot(r, v)
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("wal: rank %v: %w: %w", r, ErrCorruption, err)
	}
	return s, true, nil
}

// Pending returns r's durable pending events in id order.
func (rd *Reader) Pending(r event.Rank) ([]event.RouterEvent, error) {
	if err := rd.check(); err != nil {
		return nil, err
	}
	s, err := rd.span(store.RankBounds(store.PrefixPending, r))
	if err != nil {
		return nil, store.MapError("wal: pending", err)
	}
	var out []event.RouterEvent
	key := make([]byte, 0, store.LogKeyLen)
	for valid := s.first(); valid; valid = s.next() {
		val, err := s.it.ValueAndErr()
		if err != nil {
			_ = s.done()
			return nil, store.MapError("wal: pending", err)
		}
		// A pending record is a log record under another prefix: its checksum covers the same
		// rank and id.
		key = append(append(key[:0], store.PrefixLog), s.it.Key()[1:]...)
		var ev event.RouterEvent
		if err := DecodeRecord(&ev, key, bytes.Clone(val)); err != nil {
			_ = s.done()
			return nil, fmt.Errorf("wal: pending of rank %v: %w", r, err)
		}
		out = append(out, ev.Clone())
	}
	if err := s.done(); err != nil {
		return nil, store.MapError("wal: pending", err)
	}
	return out, nil
}
