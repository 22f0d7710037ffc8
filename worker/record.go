package worker

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
)

// MetaPrefix names the worker records in the log's global metadata: "worker/<worker_id>".
const MetaPrefix = "worker/"

// Record is one worker's durable facts (doc.go).
type Record struct {
	Partition     *partition.Key `json:"partition,omitempty"`
	Door          string         `json:"door,omitempty"`
	RecoveryURL   string         `json:"recovery_url,omitempty"`
	GroupKinds    []string       `json:"group_kinds,omitempty"`
	Lease         *Lease         `json:"lease,omitempty"`
	Registrations []Registration `json:"registrations,omitempty"`
}

// Lease is a worker's lease: its deadline (wall clock, Unix ns), its ttl, and whether the
// worker's event source implied it.
type Lease struct {
	Deadline int64 `json:"deadline_unix_ns"`
	TTL      int64 `json:"ttl_ns"`
	Implied  bool  `json:"implied,omitempty"`
}

// Registration is one Dynamo /register of the worker (an instance's dp rank fed by a vLLM ZMQ
// source); its partition is the record's.
type Registration struct {
	DPRank         uint32 `json:"dp_rank"`
	Endpoint       string `json:"endpoint"`
	ReplayEndpoint string `json:"replay_endpoint,omitempty"`
	BlockSize      int    `json:"block_size"`
	SourceID       string `json:"source_id"`
}

// Name is worker's record name.
func Name(worker uint64) string { return MetaPrefix + strconv.FormatUint(worker, 10) }

// Kinds is the record's group kinds this version knows (0: none). A name it does not know (a
// record written by a newer kvindex) is left out: UnknownKinds names those (doc.go).
func (r *Record) Kinds() event.GroupKinds {
	k, _ := r.kinds()
	return k
}

// UnknownKinds is the record's group kind names this version does not know, in the record's
// order (nil: none).
func (r *Record) UnknownKinds() []string {
	_, unknown := r.kinds()
	return unknown
}

func (r *Record) kinds() (k event.GroupKinds, unknown []string) {
	for _, name := range r.GroupKinds {
		switch g, known := event.ParseGroupKind(name); {
		case !known:
			unknown = append(unknown, name)
		case g != event.GroupKindUnset:
			k = k.With(g)
		}
	}
	return k, unknown
}

// SetKinds sets the record's group kinds: k's names in kind order, then the names this version
// does not know (UnknownKinds, kept as read: doc.go).
func (r *Record) SetKinds(k event.GroupKinds, unknown []string) {
	r.GroupKinds = nil
	if k != 0 {
		r.GroupKinds = k.Names()
	}
	r.GroupKinds = append(r.GroupKinds, unknown...)
}

// Empty reports whether the record says nothing (then it is deleted, not written).
func (r *Record) Empty() bool {
	return r.Partition == nil && r.Door == "" && r.RecoveryURL == "" && len(r.GroupKinds) == 0 && r.Lease == nil &&
		len(r.Registrations) == 0
}

// Encode is the record's value.
func (r *Record) Encode() []byte {
	v, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("worker: encoding a record: %v", err)) // plain data: cannot fail
	}
	return v
}

// Decode reads a record's value.
func Decode(v []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(v, &r); err != nil {
		return Record{}, err
	}
	slices.SortFunc(r.Registrations, func(a, b Registration) int { return int(a.DPRank) - int(b.DPRank) })
	return r, nil
}

// Load reads every worker's record from l. A format-4 dir (read before Upgrade, or read-only by
// the offline tools) is read from its format-4 entries, as Upgrade would convert them.
func Load(l *wal.Log) (map[uint64]Record, error) {
	if l.Version() == store.FormatV4 {
		recs, _, err := readFormat4(l)
		return recs, err
	}
	m, err := l.Metas(MetaPrefix)
	if err != nil {
		return nil, fmt.Errorf("worker: loading records: %w", err)
	}
	out := make(map[uint64]Record, len(m))
	for name, v := range m {
		w, err := strconv.ParseUint(strings.TrimPrefix(name, MetaPrefix), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("worker: record %q: bad worker id", name)
		}
		r, err := Decode(v)
		if err != nil {
			return nil, fmt.Errorf("worker: record %q: %w", name, err)
		}
		out[w] = r
	}
	return out, nil
}
