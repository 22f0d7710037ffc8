package engine

import (
	"context"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/recovery"
)

// HasSnapshot reports whether the rank has a snapshot in the log.
func (s *Engine) HasSnapshot(rk event.Rank) (bool, error) {
	_, ok, err := s.log.ReadSnapshot(rk)
	return ok, err
}

// RecoverySource is the worker's recovery source now ("" none).
func (s *Engine) RecoverySource(worker uint64) string { return s.recoveryOf(worker) }

// FoldLog folds the rank's log through id into its snapshot (recovery.Fold; call it on the
// rank's lane): retention as the lanes do it, for tests that race it against reads.
func (s *Engine) FoldLog(ctx context.Context, rk event.Rank, id uint64) error {
	return recovery.Fold(ctx, s.log, rk, id)
}

// LaneFailure is a lane's first failed commit (nil while every lane accepts writes); StoreCause
// also counts a failure of a direct commit.
func (s *Engine) LaneFailure() error { return s.pipe.Failure() }
