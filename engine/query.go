package engine

import (
	"slices"
	"sync"

	"github.com/kvindex/kvindex/approx"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/tier"
)

// Score is one rank's answer as the library gives it: the leading query blocks it holds on the
// device (raised to its side score), its device blocks (tree_size), and the blocks each lower
// tier (host_pinned, disk, external) extends the match by.
type Score struct {
	WorkerID uint64
	DPRank   uint32
	Score    uint32
	TreeSize uint64
	Tiers    Ext
}

// Query is one find_matches: the request's local block hashes and the answer's shape.
type Query struct {
	Hashes     []uint64
	EarlyExit  bool // stop at the first block no rank holds… as index.FindMatches
	DeviceOnly bool // leave the lower tiers out (no "tiers" extensions)
	// MinScore drops the ranks scoring below it, then TopK keeps the first k of what is left in
	// the answer's order (score desc, worker_id, dp_rank asc); 0 means no limit for both.
	MinScore uint64
	TopK     uint64
}

// Ext is the blocks each lower tier (host_pinned, disk, external) extends a rank's match by.
type Ext = [3]uint32

// Answer is a find_matches answer laid out for the hot path: Scores in the answer's order (score
// desc, worker_id, dp_rank asc, then the ranks only lower tiers hold, score 0) and, only when a
// lower tier extends some rank, Ext[i] for Scores[i] (nil otherwise). Reuse an Answer across
// queries to avoid allocating; a query without lower-tier blocks copies nothing.
type Answer struct {
	Scores []index.Score
	Ext    []Ext

	side, merged, device []index.Score
	path                 []uint64 // the device walk's matched block hashes (the tier walk's anchors)
	tiered               []tier.Score
	extBuf               []Ext // Ext's storage, reused across queries
}

// ExtOf is Scores[i]'s lower-tier extensions (zero when none).
func (a *Answer) ExtOf(i int) Ext {
	if a.Ext == nil {
		return Ext{}
	}
	return a.Ext[i]
}

var answers = sync.Pool{New: func() any { return &Answer{} }}

// Find is the one query: in key's partition (unknown: no scores), the device tree's scores
// raised to the side index's (docs/CONTRACT.md §8), extended by the lower tiers unless q.DeviceOnly (docs/CONTRACT.md
// §7), trimmed to q's shape. The answer is appended to dst[:0].
func (e *Engine) Find(dst []Score, key partition.Key, q Query) []Score {
	p, _ := e.parts.Lookup(key)
	a := answers.Get().(*Answer)
	defer answers.Put(a)
	e.FindInto(a, p, q)
	dst = slices.Grow(dst[:0], len(a.Scores))[:len(a.Scores)]
	for i := range a.Scores {
		x := &a.Scores[i]
		dst[i] = Score{WorkerID: x.WorkerID, DPRank: x.DPRank, Score: x.Score, TreeSize: x.TreeSize, Tiers: a.ExtOf(i)}
	}
	return dst
}

// FindInto answers q in partition p (nil: no scores) into a (its slices reused). It is Find
// without the copy into []Score: the HTTP doors and the benchmark answer from it. The ranks of
// workers whose lease expired are left out (lease.go).
func (e *Engine) FindInto(a *Answer, p *partition.Partition, q Query) {
	a.Scores, a.Ext = a.Scores[:0], nil
	if p == nil {
		return
	}
	walk := !q.DeviceOnly && p.Tiers.LowerEdges() > 0
	if !walk {
		a.Scores = e.deviceScores(a, a.Scores, p, q.Hashes, q.EarlyExit, false)
	} else {
		a.device = e.deviceScores(a, a.device[:0], p, q.Hashes, q.EarlyExit, true)
		a.tiered = p.Tiers.Extend(a.tiered, q.Hashes, a.device, a.path)
		ext := slices.Grow(a.extBuf[:0], len(a.tiered))[:len(a.tiered)]
		extended := false
		for i := range a.tiered {
			a.Scores = append(a.Scores, a.tiered[i].Score)
			ext[i] = a.tiered[i].Ext
			extended = extended || a.tiered[i].HasExt()
		}
		a.extBuf = ext
		if extended {
			a.Ext = ext
		}
	}
	e.dropStale(a) // before the limits: top_k counts live ranks only
	n := trimmed(a.Scores, q.MinScore, q.TopK)
	a.Scores = a.Scores[:n]
	if a.Ext != nil {
		a.Ext = a.Ext[:n]
	}
}

// HashTokens hashes a request's tokens into local block hashes with key's block size (an
// unknown partition: the engine's --block-size) and the LoRA / namespace salt.
func (e *Engine) HashTokens(key partition.Key, tokens []uint32, lora, namespace string) []uint64 {
	bs := e.cfg.BlockSize
	if p, ok := e.parts.Lookup(key); ok {
		bs = p.BlockSize
	}
	return event.BlockHashes(tokens, bs, lora, namespace)
}

// deviceScores appends to dst the event-fed tree's scores, each rank raised to its side score
// where that is higher. With wantPath it also records in a.path the block hash matched at each
// depth, which only the tier walk needs.
func (e *Engine) deviceScores(a *Answer, dst []index.Score, p *partition.Partition, hashes []uint64, earlyExit, wantPath bool) []index.Score {
	a.side = e.approx.Scores(a.side[:0], p.ID, hashes, earlyExit)
	tree := dst
	if len(a.side) > 0 {
		tree = a.merged[:0]
	}
	if wantPath {
		tree, a.path = p.Index.FindMatchesPath(tree, a.path[:0], hashes, earlyExit)
	} else {
		tree = p.Index.FindMatchesInto(tree, hashes, earlyExit)
	}
	if len(a.side) == 0 {
		return tree
	}
	a.merged = tree
	return approx.Merge(dst, a.merged, a.side)
}

// queryDevice is the device part of the query (tree and side index, max rule) appended to
// dst[:0]: what Dynamo's /query summarizes.
func (e *Engine) queryDevice(dst []index.Score, p *partition.Partition, hashes []uint64) []index.Score {
	dst = dst[:0]
	if p == nil {
		return dst
	}
	a := answers.Get().(*Answer)
	defer answers.Put(a)
	return e.dropStaleScores(e.deviceScores(a, dst, p, hashes, false, false))
}

// trimmed is how many scores min_score then top_k keep. The ranks with a score of at least
// minScore are a prefix of the answer's order (the ranks with lower-tier hits only, score 0, come
// last), so both limits only cut it.
func trimmed(sc []index.Score, minScore, topK uint64) int {
	n := len(sc)
	if minScore > 0 {
		for n > 0 && uint64(sc[n-1].Score) < minScore {
			n--
		}
	}
	if topK > 0 && topK < uint64(n) {
		n = int(topK)
	}
	return n
}
