package engine

import (
	"context"
	"errors"

	"github.com/kvindex/kvindex/dumpcache"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/lanes"
)

// The TreeDump cache of the range route (package dumpcache) behind the engine.

// DumpCacheOptions configure the TreeDump cache (dumpcache.Options).
type DumpCacheOptions = dumpcache.Options

// DumpCacheCounters are the TreeDump cache's counters since Open (also in /metrics).
type DumpCacheCounters = dumpcache.Counters

// DefaultDumpCacheMaxCost is DumpCacheOptions.MaxCost's default.
const DefaultDumpCacheMaxCost = dumpcache.DefaultMaxCost

// ErrDumpCacheClosed is returned by a TreeDump request after the cache was closed (the server is
// shutting down).
var ErrDumpCacheClosed = dumpcache.ErrClosed

// dumpRanks is what the TreeDump cache reads of the engine's ranks (dumpcache.Ranks).
type dumpRanks struct{ e *Engine }

func (r dumpRanks) Do(ctx context.Context, rk event.Rank, fn func()) error {
	err := r.e.pipe.Do(ctx, rk, fn)
	if errors.Is(err, lanes.ErrUnknownRank) {
		return dumpcache.ErrUnknownRank
	}
	return err
}

func (r dumpRanks) State(rk event.Rank) dumpcache.Stamp { return r.e.rankStatus(rk) }

// DumpRank dumps rk from its partition's tiers; a partition gone (dropped since the request
// found the rank) dumps nothing: a read makes no partition up (TiersOf would).
func (r dumpRanks) DumpRank(rk event.Rank, fn func(ev *event.RouterEvent) error) error {
	p := r.e.parts.Get(rk.Partition)
	if p == nil {
		return nil
	}
	return p.Tiers.DumpRank(rk, fn)
}

func (r dumpRanks) Range(rk event.Rank, from uint64, n int, fn func(ev *event.RouterEvent) error) error {
	return r.e.log.Range(rk, from, n, fn)
}

// DumpCacheCounters reads the TreeDump cache's counters.
func (s *Engine) DumpCacheCounters() DumpCacheCounters { return s.dumps.Counters() }

// DumpCacheBytes is the TreeDump cache's bytes held now and its bound.
func (s *Engine) DumpCacheBytes() (used, limit uint64) { return s.dumps.Bytes() }

// SetDumpTestBuild installs a hook run on the lane before each full TreeDump build; an error
// fails the build (tests of the single flight and of failed builds).
func (s *Engine) SetDumpTestBuild(f func(Rank) error) { s.dumps.SetTestBuild(f) }

// CloseDumpCache closes the TreeDump cache early (Close does it too): later dumps fail with
// ErrDumpCacheClosed.
func (s *Engine) CloseDumpCache() { s.dumps.Close() }
