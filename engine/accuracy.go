package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/partition"
)

// Measured accuracy (docs/API.md, "Accuracy"). A router reports, after a request ran, the prefix
// the engine actually reused for it (vLLM: usage.prompt_tokens_details.cached_tokens): an
// outcome. The engine compares it with what it answers for that rank at that moment (the
// device score of the one query, stale ranks left out, so 0 for a stale rank) and keeps per
// partition, and within it per source kind of the rank's worker (its door at that moment):
// outcomes, predicted and realized blocks, over- and under-predictions with their block totals,
// and a histogram of predicted − realized blocks.
//
// Outcomes are cheap: nothing is written to the log. The counters live in memory from Open and
// start from zero after a restart (as Prometheus counters do).

// ErrBadOutcome is returned by RecordOutcomes for an outcome that cannot be compared: no
// partition of its name, a rank the partition does not hold, no hashes and no tokens (or both),
// tokens that are not a whole number of blocks, or a cached prefix longer than the request.
var ErrBadOutcome = errors.New("engine: bad outcome")

// Outcome is one request's realized prefix hit on one rank.
type Outcome struct {
	Key  partition.Key
	Rank Rank // WorkerID and DPRank; the partition is Key's
	// The request: its local block hashes, or its tokens (hashed with the partition's block
	// size and the LoRA / namespace salt); exactly one of them.
	Hashes          []uint64
	Tokens          []uint32
	Lora, Namespace string
	// CachedTokens is the engine's reported prefix hit, in tokens. A partial block is no block
	// hit: realized blocks are CachedTokens / block size.
	CachedTokens uint64
}

// OutcomeError names the first refused outcome of a batch (nothing of the batch is recorded).
type OutcomeError struct {
	Index int
	Err   error
}

func (e *OutcomeError) Error() string { return fmt.Sprintf("outcome %d: %v", e.Index, e.Err) }
func (e *OutcomeError) Unwrap() error { return e.Err }

// ErrorBounds are the upper bounds of the histogram of predicted − realized blocks: bucket i
// counts the outcomes with ErrorBounds[i-1] < d ≤ ErrorBounds[i], the last bucket those above
// the last bound.
var ErrorBounds = []int64{-64, -16, -8, -4, -2, -1, 0, 1, 2, 4, 8, 16, 64}

// Accuracy is one partition's outcomes since Open, in all and per source kind.
type Accuracy struct {
	Key       partition.Key
	BlockSize int
	AccuracyCounts
	BySource []SourceAccuracy // the source kinds with outcomes, by name
}

// SourceAccuracy is the outcomes of a partition's workers of one source kind.
type SourceAccuracy struct {
	Source Source
	AccuracyCounts
}

// AccuracyCounts are the counters of a set of outcomes.
type AccuracyCounts struct {
	Outcomes  uint64
	Exact     uint64 // predicted == realized
	Predicted uint64 // blocks predicted, summed
	Realized  uint64 // blocks realized, summed
	// Over-predictions (predicted > realized: the index promised blocks the engine did not
	// reuse) and under-predictions, with the blocks they were off by, summed.
	Over, OverBlocks   uint64
	Under, UnderBlocks uint64
	ErrorSum           int64    // Σ (predicted − realized)
	Histogram          []uint64 // len(ErrorBounds)+1 buckets (ErrorBounds)
}

type accuracy struct {
	mu     sync.Mutex
	byPart map[uint32]*partAccuracy
}

type partAccuracy struct {
	all   Accuracy
	bySrc map[Source]*AccuracyCounts
}

func newCounts() AccuracyCounts {
	return AccuracyCounts{Histogram: make([]uint64, len(ErrorBounds)+1)}
}

// prepared is a validated outcome: its partition, its rank's source kind and prediction.
type prepared struct {
	p                   *partition.Partition
	src                 Source
	predicted, realized uint64
}

// RecordOutcomes compares each outcome with what the index answers for its rank now and counts
// it in its partition. The batch is validated whole first: a refusal (*OutcomeError wrapping
// ErrBadOutcome) records nothing. It returns the outcomes recorded.
func (e *Engine) RecordOutcomes(os []Outcome) (int, error) {
	preps := make([]prepared, len(os))
	a := answers.Get().(*Answer)
	defer answers.Put(a)
	for i := range os {
		pr, err := e.prepareOutcome(a, &os[i])
		if err != nil {
			return 0, &OutcomeError{Index: i, Err: err}
		}
		preps[i] = pr
	}
	acc := &e.acc
	acc.mu.Lock()
	defer acc.mu.Unlock()
	if acc.byPart == nil {
		acc.byPart = map[uint32]*partAccuracy{}
	}
	for _, pr := range preps {
		s := acc.byPart[pr.p.ID]
		if s == nil {
			s = &partAccuracy{all: Accuracy{Key: pr.p.Key, BlockSize: pr.p.BlockSize, AccuracyCounts: newCounts()}, bySrc: map[Source]*AccuracyCounts{}}
			acc.byPart[pr.p.ID] = s
		}
		s.all.add(pr.predicted, pr.realized)
		c := s.bySrc[pr.src]
		if c == nil {
			n := newCounts()
			c = &n
			s.bySrc[pr.src] = c
		}
		c.add(pr.predicted, pr.realized)
	}
	return len(os), nil
}

func (s *AccuracyCounts) add(predicted, realized uint64) {
	s.Outcomes++
	s.Predicted += predicted
	s.Realized += realized
	d := int64(predicted) - int64(realized)
	s.ErrorSum += d
	switch {
	case d == 0:
		s.Exact++
	case d > 0:
		s.Over++
		s.OverBlocks += uint64(d)
	default:
		s.Under++
		s.UnderBlocks += uint64(-d)
	}
	i, _ := slices.BinarySearch(ErrorBounds, d) // the first bound ≥ d
	s.Histogram[i]++
}

func (e *Engine) prepareOutcome(a *Answer, o *Outcome) (prepared, error) {
	p, ok := e.parts.Lookup(o.Key)
	if !ok {
		return prepared{}, fmt.Errorf("%w: no partition (%s, %s)", ErrBadOutcome, o.Key.ModelName, o.Key.RoutingGroup)
	}
	rk := o.Rank
	rk.Partition = p.ID
	if _, known := e.pipe.RankStatus(rk); !known && e.approx.RankBlocks(rk) == 0 {
		return prepared{}, fmt.Errorf("%w: partition (%s, %s) holds no rank %d/%d", ErrBadOutcome, p.Key.ModelName, p.Key.RoutingGroup, rk.WorkerID, rk.DPRank)
	}
	hashes := o.Hashes
	switch {
	case o.Hashes != nil && o.Tokens != nil:
		return prepared{}, fmt.Errorf("%w: give block_hashes or tokens, not both", ErrBadOutcome)
	case o.Tokens != nil:
		if len(o.Tokens)%p.BlockSize != 0 {
			return prepared{}, fmt.Errorf("%w: %d tokens are not a whole number of blocks of %d", ErrBadOutcome, len(o.Tokens), p.BlockSize)
		}
		hashes = event.BlockHashes(o.Tokens, p.BlockSize, o.Lora, o.Namespace)
	case o.Hashes == nil:
		return prepared{}, fmt.Errorf("%w: missing block_hashes or tokens", ErrBadOutcome)
	}
	realized := o.CachedTokens / uint64(p.BlockSize)
	if realized > uint64(len(hashes)) {
		return prepared{}, fmt.Errorf("%w: cached_tokens %d exceed the request's %d blocks of %d tokens", ErrBadOutcome, o.CachedTokens, len(hashes), p.BlockSize)
	}
	e.FindInto(a, p, Query{Hashes: hashes, DeviceOnly: true})
	predicted := uint64(0)
	for i := range a.Scores {
		if a.Scores[i].WorkerID == rk.WorkerID && a.Scores[i].DPRank == rk.DPRank {
			predicted = uint64(a.Scores[i].Score)
			break
		}
	}
	return prepared{p: p, src: e.doorOf(rk.WorkerID), predicted: predicted, realized: realized}, nil
}

// Accuracies lists every partition's accuracy (partitions with outcomes), by partition name.
func (e *Engine) Accuracies() []Accuracy {
	acc := &e.acc
	acc.mu.Lock()
	out := make([]Accuracy, 0, len(acc.byPart))
	for _, s := range acc.byPart {
		c := s.all
		c.Histogram = slices.Clone(c.Histogram)
		for src, sc := range s.bySrc {
			x := SourceAccuracy{Source: src, AccuracyCounts: *sc}
			x.Histogram = slices.Clone(sc.Histogram)
			c.BySource = append(c.BySource, x)
		}
		slices.SortFunc(c.BySource, func(a, b SourceAccuracy) int { return strings.Compare(string(a.Source), string(b.Source)) })
		out = append(out, c)
	}
	acc.mu.Unlock()
	slices.SortFunc(out, func(a, b Accuracy) int {
		if a.Key.ModelName != b.Key.ModelName {
			if a.Key.ModelName < b.Key.ModelName {
				return -1
			}
			return 1
		}
		if a.Key.RoutingGroup < b.Key.RoutingGroup {
			return -1
		}
		if a.Key.RoutingGroup > b.Key.RoutingGroup {
			return 1
		}
		return 0
	})
	return out
}
