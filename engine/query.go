package engine

import (
	"sync"

	"github.com/kvindex/kvindex/approx"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/partition"
	"github.com/kvindex/kvindex/tier"
)

// Score is one rank's answer: leading query blocks held on the device (raised to its side
// score), the rank's device blocks, and the blocks each lower tier extends the match by.
type Score = tier.Score

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

type scoreBuf struct {
	scores, side, merged []index.Score
	path                 []uint64 // the device walk's matched block hashes (the tier walk's anchors)
	tiered               []tier.Score
}

var scoreBufs = sync.Pool{New: func() any { return &scoreBuf{} }}

// Find is the one query: in key's partition (unknown: no scores), the device tree's scores
// raised to the side index's (SPEC §8), extended by the lower tiers unless q.DeviceOnly (SPEC
// §7), trimmed to q's shape. The answer is appended to dst[:0].
func (e *Engine) Find(dst []Score, key partition.Key, q Query) []Score {
	p, _ := e.parts.Lookup(key)
	return e.FindIn(dst, p, q)
}

// FindIn is Find in partition p (nil: no scores).
func (e *Engine) FindIn(dst []Score, p *partition.Partition, q Query) []Score {
	dst = dst[:0]
	if p == nil {
		return dst
	}
	buf := scoreBufs.Get().(*scoreBuf)
	defer scoreBufs.Put(buf)
	walk := !q.DeviceOnly && p.Tiers.LowerEdges() > 0
	device := e.deviceScores(buf, p, q.Hashes, q.EarlyExit, walk)
	if walk {
		dst = p.Tiers.Extend(dst, q.Hashes, device, buf.path)
	} else {
		for _, d := range device {
			dst = append(dst, tier.Score{Score: d})
		}
	}
	return trim(dst, q.MinScore, q.TopK)
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

// deviceScores is the event-fed tree's scores, each rank raised to its side score where that
// is higher. With wantPath it also records in buf.path the block hash matched at each depth,
// which only the tier walk needs.
func (e *Engine) deviceScores(buf *scoreBuf, p *partition.Partition, hashes []uint64, earlyExit, wantPath bool) []index.Score {
	buf.scores, buf.path = buf.scores[:0], buf.path[:0]
	if wantPath {
		buf.scores, buf.path = p.Index.FindMatchesPath(buf.scores, buf.path, hashes, earlyExit)
	} else {
		buf.scores = p.Index.FindMatchesInto(buf.scores, hashes, earlyExit)
	}
	buf.side = e.approx.Scores(buf.side[:0], p.ID, hashes, earlyExit)
	if len(buf.side) == 0 {
		return buf.scores
	}
	buf.merged = approx.Merge(buf.merged, buf.scores, buf.side)
	return buf.merged
}

// DeviceScores is the device part of the query (tree and side index, max rule) appended to
// dst[:0]: what Dynamo's /query summarizes.
func (e *Engine) DeviceScores(dst []index.Score, p *partition.Partition, hashes []uint64) []index.Score {
	dst = dst[:0]
	if p == nil {
		return dst
	}
	buf := scoreBufs.Get().(*scoreBuf)
	defer scoreBufs.Put(buf)
	return append(dst, e.deviceScores(buf, p, hashes, false, false)...)
}

// trim applies min_score then top_k. The ranks with a score of at least minScore are a prefix
// of the answer's order (the ranks with lower-tier hits only, score 0, come last), so both
// limits only cut it.
func trim(sc []tier.Score, minScore, topK uint64) []tier.Score {
	if minScore > 0 {
		n := len(sc)
		for n > 0 && uint64(sc[n-1].Score.Score) < minScore {
			n--
		}
		sc = sc[:n]
	}
	if topK > 0 && topK < uint64(len(sc)) {
		sc = sc[:topK]
	}
	return sc
}
