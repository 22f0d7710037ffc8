package index

import "github.com/kvindex/kvindex/event"

// DumpRank calls fn with r's blocks as Stored events in replay order (a parent before its
// children), EventID contiguous from 0. The event passed to fn is only valid during the call; an
// error from fn stops the dump and is returned. An unknown rank dumps nothing.
//
// The dump holds the blocks whose whole position the rank holds: every ancestor of the block's
// position is held by r too. Those are exactly the blocks that can count in a score, so replaying the
// dump into an empty rank (ReplaceRank) reproduces every Score.Score. A block stranded under an
// ancestor r no longer holds (a mid-chain Removed) cannot be written as a Stored event: it is
// left out, so after a replay TreeSize and RankBlocks can be lower by the stranded blocks.
//
// The order is deterministic: siblings by tokens hash, block hashes of one position ascending; a
// chain of positions with one block and one child each is one event.
//
// DumpRank reads the rank's lookup: call it from the rank's writer, or when no writer runs on r.
func (ix *Index) DumpRank(r event.Rank, fn func(ev *event.RouterEvent) error) error {
	return ix.dumpRankRuns(r, fn)
}
