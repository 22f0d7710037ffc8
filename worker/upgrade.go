package worker

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/wal"
)

// The per-worker prefixes of format 4, each one fact of a worker (Upgrade folds them):
//
//	source/<worker_id>                  the recovery URL (UTF-8)
//	wsource/<worker_id>                 the kind of door that last fed it (UTF-8)
//	groupkinds/<worker_id>              its event source's indexed group kinds (comma separated)
//	lease/<worker_id>                   deadline Unix ns i64 BE | ttl ns i64 BE [| implied u8]
//	register/<instance_id>/<dp_rank>    a Dynamo /register (JSON, with its partition's names)
//	zmqsource/<source_id>               a registration's source config (JSON; also the prefix of
//	                                    the ZMQ sources added over HTTP, which stay)
const (
	v4URL      = "source/"
	v4Door     = "wsource/"
	v4Kinds    = "groupkinds/"
	v4Lease    = "lease/"
	v4Register = "register/"
	v4Source   = "zmqsource/"
)

// v4Registration is a format-4 registration's value.
type v4Registration struct {
	InstanceID     uint64 `json:"instance_id"`
	DPRank         uint32 `json:"dp_rank"`
	Endpoint       string `json:"endpoint"`
	ReplayEndpoint string `json:"replay_endpoint,omitempty"`
	ModelName      string `json:"model_name"`
	RoutingGroup   string `json:"routing_group"`
	BlockSize      int    `json:"block_size"`
	SourceID       string `json:"source_id"`
}

// readFormat4 reads a format-4 dir's per-worker entries as records; names are the entries read.
func readFormat4(l *wal.Log) (map[uint64]Record, []string, error) {
	recs := map[uint64]Record{}
	var names []string
	get := func(w uint64) *Record {
		r := recs[w]
		return &r
	}
	for _, prefix := range []string{v4URL, v4Door, v4Kinds, v4Lease, v4Register} {
		m, err := l.Metas(prefix)
		if err != nil {
			return nil, nil, fmt.Errorf("worker: reading format-4 entries %s: %w", prefix, err)
		}
		for name, v := range m {
			names = append(names, name)
			id, _, _ := strings.Cut(strings.TrimPrefix(name, prefix), "/")
			w, err := strconv.ParseUint(id, 10, 64)
			if err != nil {
				continue // not a worker's entry: deleted with the others
			}
			r := get(w)
			switch prefix {
			case v4URL:
				r.RecoveryURL = string(v)
			case v4Door:
				r.Door = string(v)
			case v4Kinds:
				if v := string(v); v != "" {
					r.GroupKinds = strings.Split(v, ",")
				}
				r.SetKinds(r.Kinds(), r.UnknownKinds()) // canonical names; unknown ones kept (doc.go)
			case v4Lease:
				if len(v) != 16 && len(v) != 17 {
					continue // as format 4 read it: skipped
				}
				r.Lease = &Lease{Deadline: int64(binary.BigEndian.Uint64(v)), TTL: int64(binary.BigEndian.Uint64(v[8:])),
					Implied: len(v) == 17 && v[16] == 1}
			case v4Register:
				var x v4Registration
				if err := json.Unmarshal(v, &x); err != nil {
					return nil, nil, fmt.Errorf("worker: format-4 registration %q: %w", name, err)
				}
				k := partition.KeyOf(x.ModelName, x.RoutingGroup, "")
				r.Partition = &k
				r.Registrations = append(r.Registrations, Registration{DPRank: x.DPRank, Endpoint: x.Endpoint,
					ReplayEndpoint: x.ReplayEndpoint, BlockSize: x.BlockSize, SourceID: x.SourceID})
				if x.SourceID != "" {
					names = append(names, v4Source+x.SourceID)
				}
			}
			recs[w] = *r
		}
	}
	for w, r := range recs { // registrations by dp rank, as Decode leaves them
		r, _ = Decode(r.Encode())
		recs[w] = r
	}
	return recs, names, nil
}

// Upgrade converts a format-4 dir's per-worker entries into one record per worker and deletes
// them, with the format version set to 5, in one synced batch (doc.go). A dir of another format
// is left as it is. It returns the workers converted.
func Upgrade(l *wal.Log) (int, error) {
	if l.Version() != store.FormatV4 {
		return 0, nil
	}
	recs, names, err := readFormat4(l)
	if err != nil {
		return 0, err
	}
	b := l.NewBatch()
	defer b.Close()
	for _, name := range names {
		b.DeleteMeta(name)
	}
	for w, r := range recs {
		if !r.Empty() {
			b.SetMeta(Name(w), r.Encode())
		}
	}
	if err := l.CommitUpgrade(b, store.FormatVersion); err != nil {
		return 0, err
	}
	return len(recs), nil
}
