package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/tier"
	"github.com/kvindex/kvindex/wal"
)

// Sentinels.
var (
	// ErrBlockSizeMismatch: the partition exists with another block size.
	ErrBlockSizeMismatch = errors.New("partition: block size mismatch")
	// ErrWorkerElsewhere: the worker already has ranks in another partition.
	ErrWorkerElsewhere = errors.New("partition: worker belongs to another partition")
	// ErrBadName: an empty or oversized model_name / routing_group.
	ErrBadName = errors.New("partition: bad name")
	// ErrDropped: a Hold of a partition that was dropped since it was looked up (the caller
	// ensures the partition again).
	ErrDropped = errors.New("partition: dropped")
)

// ElsewhereError is a refusal of a worker that belongs to another partition (Have); it is
// ErrWorkerElsewhere. The doors answer it with how to fix it (the server: remove the worker
// first, or write into its partition).
type ElsewhereError struct {
	Worker uint64
	Have   Key
}

func (e *ElsewhereError) Error() string {
	return fmt.Sprintf("%v: worker %d has ranks in partition %s", ErrWorkerElsewhere, e.Worker, e.Have)
}

func (e *ElsewhereError) Unwrap() error { return ErrWorkerElsewhere }

// DefaultName is the model_name and routing_group of the default partition.
const DefaultName = "default"

// Key names a partition.
type Key struct {
	ModelName    string `json:"model_name"`
	RoutingGroup string `json:"routing_group"`
}

// Default is the default partition's key.
var Default = Key{ModelName: DefaultName, RoutingGroup: DefaultName}

// KeyOf returns the key for the given names, empty ones meaning "default". tenant (Dynamo's
// legacy tenant_id) is accepted and ignored, as Dynamo ignores it (docs/CONTRACT.md §9): it never selects a
// routing group.
func KeyOf(model, group, _tenant string) Key {
	if model == "" {
		model = DefaultName
	}
	if group == "" {
		group = DefaultName
	}
	return Key{ModelName: model, RoutingGroup: group}
}

func (k Key) String() string { return k.ModelName + ":" + k.RoutingGroup }

func (k Key) check() error {
	for _, s := range []string{k.ModelName, k.RoutingGroup} {
		if s == "" || len(s) > 256 {
			return fmt.Errorf("%w: %q (1 to 256 bytes)", ErrBadName, s)
		}
	}
	return nil
}

// Partition is one partition: its id, names, block size and state: Tiers (the device tree Index
// and the lower tiers; docs/CONTRACT.md §7).
type Partition struct {
	ID        uint32
	Key       Key
	BlockSize int
	Index     *index.Index // Tiers.Device
	Tiers     *tier.Tiers
	persisted bool
}

// newPartition returns a partition with an empty state.
func newPartition(id uint32, k Key, blockSize int, ixOpts index.Options) *Partition {
	ts := tier.New(index.New(ixOpts))
	return &Partition{ID: id, Key: k, BlockSize: blockSize, Index: ts.Device, Tiers: ts}
}

type record struct {
	ModelName    string `json:"model_name"`
	RoutingGroup string `json:"routing_group"`
	BlockSize    int    `json:"block_size"`
}

const metaPrefix = "partition/"

// nextMeta keeps the next partition id once a partition was dropped, so a dropped id is never
// given again (outside metaPrefix: Open reads every name under it as an id).
const nextMeta = "partition-next"

// Set is every partition of a data dir, and how many workers each one holds (which worker
// belongs where is the engine's worker table: it holds a partition for each worker it places
// there). Safe for concurrent use.
type Set struct {
	log       *wal.Log
	blockSize int // the block size of a partition created by a /v1 write
	ixOpts    index.Options

	creating sync.Mutex // held by Ensure while it records a new partition (mu is not)

	mu      sync.RWMutex
	byID    map[uint32]*Partition
	byKey   map[Key]*Partition
	next    uint32
	holders map[uint32]int  // partition id → workers placed in it (Hold, Unhold)
	dropped map[uint32]bool // ids dropped (never reused: next only grows)
}

// Open loads the partitions recorded in log (nil: an in-memory set, for tests and tools).
// defaultBlockSize is the block size of partitions created by a /v1 write.
func Open(log *wal.Log, defaultBlockSize int, ixOpts index.Options) (*Set, error) {
	s := &Set{log: log, blockSize: defaultBlockSize, ixOpts: ixOpts, byID: map[uint32]*Partition{},
		byKey: map[Key]*Partition{}, next: 1, holders: map[uint32]int{}, dropped: map[uint32]bool{}}
	if log != nil {
		m, err := log.Metas(metaPrefix)
		if err != nil {
			return nil, fmt.Errorf("partition: loading: %w", err)
		}
		for name, v := range m {
			id, err := strconv.ParseUint(strings.TrimPrefix(name, metaPrefix), 10, 32)
			if err != nil {
				return nil, fmt.Errorf("partition: record %q: bad id: %w", name, err)
			}
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return nil, fmt.Errorf("partition: record %q: %w", name, err)
			}
			p := newPartition(uint32(id), Key{r.ModelName, r.RoutingGroup}, r.BlockSize, ixOpts)
			p.persisted = true
			s.byID[p.ID], s.byKey[p.Key] = p, p
			s.next = max(s.next, p.ID+1)
		}
		v, ok, err := log.Meta(nextMeta)
		if err != nil {
			return nil, fmt.Errorf("partition: loading: %w", err)
		}
		if ok {
			n, err := strconv.ParseUint(string(v), 10, 32)
			if err != nil {
				return nil, fmt.Errorf("partition: record %q: %w", nextMeta, err)
			}
			s.next = max(s.next, uint32(n))
		}
	}
	if _, ok := s.byID[0]; !ok {
		p := newPartition(0, Default, defaultBlockSize, ixOpts)
		s.byID[0], s.byKey[Default] = p, p
	}
	return s, nil
}

// Lookup returns the partition of k; ok is false for an unknown one (reads create nothing).
func (s *Set) Lookup(k Key) (*Partition, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.byKey[k]
	return p, ok
}

// Get returns partition id, or nil.
func (s *Set) Get(id uint32) *Partition {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.byID[id]
}

// IndexOf returns partition id's device tree (TiersOf(id).Device).
func (s *Set) IndexOf(id uint32) *index.Index { return s.TiersOf(id).Device }

// TiersOf returns partition id's state in every tier (what the lanes apply events to). Every rank
// the lanes see belongs to a partition of the set; an unknown id (a damaged dir) gets an empty
// partition of its own. A dropped id gets an empty state that joins no set: a lane that still
// visits a rank of a dropped partition (removing a worker again) finds nothing there, and no
// partition is made up under an unknown-<id> name (which Ensure would then try to record).
func (s *Set) TiersOf(id uint32) *tier.Tiers {
	if p := s.Get(id); p != nil {
		return p.Tiers
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.byID[id]; p != nil {
		return p.Tiers
	}
	name := Key{ModelName: "unknown-" + strconv.FormatUint(uint64(id), 10), RoutingGroup: DefaultName}
	if s.dropped[id] {
		return newPartition(id, name, s.blockSize, s.ixOpts).Tiers
	}
	p := newPartition(id, name, s.blockSize, s.ixOpts)
	s.byID[id], s.byKey[p.Key] = p, p
	s.next = max(s.next, id+1)
	return p.Tiers
}

// Ensure returns k's partition, creating and persisting it when needed. blockSize 0 takes the
// set's default; a partition that exists (persisted) with another block size is refused.
//
// The record of a new partition is committed (a synced log write) under creating, not under mu:
// every Lookup and Get (each query) takes mu, and none waits for an fsync. The partition joins
// the set once its record is durable.
func (s *Set) Ensure(ctx context.Context, k Key, blockSize int) (*Partition, error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	if p, ok, err := s.existing(k, blockSize); ok || err != nil {
		return p, err
	}
	s.creating.Lock()
	defer s.creating.Unlock()
	if p, ok, err := s.existing(k, blockSize); ok || err != nil {
		return p, err // made while this call waited
	}
	if blockSize == 0 {
		blockSize = s.blockSize
	}
	// The id: an unrecorded partition of k keeps its own (the default partition, or one a
	// damaged dir's rank made up); a new one takes the next id, reserved now so that nothing
	// else takes it while the record is written (an id whose record fails is skipped: ids only
	// grow).
	s.mu.Lock()
	p := s.byKey[k]
	id := s.next
	if p != nil {
		id = p.ID
	} else {
		s.next++
	}
	s.mu.Unlock()
	if s.log != nil {
		v, err := json.Marshal(record{ModelName: k.ModelName, RoutingGroup: k.RoutingGroup, BlockSize: blockSize})
		if err != nil {
			return nil, err
		}
		b := s.log.NewBatch()
		defer b.Close()
		b.SetMeta(metaPrefix+strconv.FormatUint(uint64(id), 10), v)
		if err := s.log.Commit(ctx, b); err != nil {
			return nil, fmt.Errorf("partition: recording %s: %w", k, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p == nil || s.byKey[k] != p {
		p = newPartition(id, k, 0, s.ixOpts)
	}
	p.BlockSize, p.persisted = blockSize, true
	s.byID[p.ID], s.byKey[k] = p, p
	return p, nil
}

// existing returns k's recorded partition (ok), refusing another block size; ok is false when
// k has none yet.
func (s *Set) existing(k Key, blockSize int) (*Partition, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p := s.byKey[k]
	if p == nil || !p.persisted {
		return nil, false, nil
	}
	if blockSize != 0 && blockSize != p.BlockSize {
		return nil, false, fmt.Errorf("%w: partition %s has block size %d, not %d", ErrBlockSizeMismatch, k, p.BlockSize, blockSize)
	}
	return p, true, nil
}

// CheckSize reports, without changing anything, whether Ensure(k, blockSize) would refuse the
// block size (ErrBlockSizeMismatch).
func (s *Set) CheckSize(k Key, blockSize int) error {
	_, _, err := s.existing(k, blockSize)
	return err
}

// Hold counts one more worker placed in partition id (the engine's worker table, under its own
// lock, for each worker it places there): a held partition is never dropped. A dropped id is
// refused (ErrDropped: the caller ensures the partition anew).
func (s *Set) Hold(id uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped[id] || s.byID[id] == nil {
		return fmt.Errorf("%w: partition %d", ErrDropped, id)
	}
	s.holders[id]++
	return nil
}

// Unhold counts one worker less in partition id (the worker was removed, or left for another).
func (s *Set) Unhold(id uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holders[id] <= 1 {
		delete(s.holders, id)
		return
	}
	s.holders[id]--
}

// Recorded reports whether partition id exists and has its record (was created by Ensure and not
// dropped since). The default partition is in every set, recorded or not.
func (s *Set) Recorded(id uint32) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p := s.byID[id]
	return p != nil && p.persisted
}

// Drop forgets partition id and deletes its record durably, so a restart does not bring it back
// and a later Ensure may give it another block size (docs/CONTRACT.md §9: a partition whose last worker
// leaves is dropped). It refuses (false) while a worker is placed in the partition (Hold); the
// caller checks that the partition holds nothing else (ranks, tiers, side entries), and every
// write into a partition holds it for its worker first, so a write racing the drop either keeps
// the partition or, holding after, gets ErrDropped and ensures it anew. The default partition
// stays in the set, unrecorded, as in a new set.
func (s *Set) Drop(ctx context.Context, id uint32) (bool, error) {
	if id == 0 {
		return s.dropDefault(ctx)
	}
	// The record is deleted under creating, not under mu (which every Lookup and Get, each
	// query, takes): the partition leaves the set first, so a Hold meanwhile gets ErrDropped
	// and its Ensure waits on creating until the deletion is durable; a failed deletion puts
	// the partition back.
	s.creating.Lock()
	defer s.creating.Unlock()
	s.mu.Lock()
	p := s.byID[id]
	if p == nil || s.holders[id] > 0 {
		s.mu.Unlock()
		return false, nil
	}
	persisted, next := p.persisted, s.next
	p.persisted = false
	s.dropped[id] = true
	delete(s.byID, id)
	ownsKey := s.byKey[p.Key] == p
	if ownsKey {
		delete(s.byKey, p.Key)
	}
	s.mu.Unlock()
	if s.log == nil || !persisted {
		return true, nil
	}
	if err := s.commitDrop(ctx, id, next); err != nil {
		s.mu.Lock()
		p.persisted = true
		delete(s.dropped, id)
		s.byID[id] = p
		if ownsKey {
			s.byKey[p.Key] = p
		}
		s.mu.Unlock()
		return false, fmt.Errorf("partition: dropping %s: %w", p.Key, err)
	}
	return true, nil
}

// dropDefault unrecords the default partition (it stays in the set, as in a new set).
func (s *Set) dropDefault(ctx context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.byID[0]
	if p == nil || !p.persisted || s.holders[0] > 0 {
		return false, nil
	}
	if s.log != nil {
		if err := s.commitDrop(ctx, 0, s.next); err != nil {
			return false, fmt.Errorf("partition: dropping %s: %w", p.Key, err)
		}
	}
	p.persisted, p.BlockSize = false, s.blockSize
	return true, nil
}

// commitDrop deletes partition id's record durably and keeps next (ids are never reused).
func (s *Set) commitDrop(ctx context.Context, id, next uint32) error {
	b := s.log.NewBatch()
	defer b.Close()
	b.DeleteMeta(metaPrefix + strconv.FormatUint(uint64(id), 10))
	b.SetMeta(nextMeta, []byte(strconv.FormatUint(uint64(next), 10)))
	return s.log.Commit(ctx, b)
}

// All returns every partition, by id.
func (s *Set) All() []*Partition {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Partition, 0, len(s.byID))
	for _, p := range s.byID {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *Partition) int { return int(a.ID) - int(b.ID) })
	return out
}
