package engine

import (
	"reflect"
	"testing"

	"github.com/kvindex/kvindex/index"
	"github.com/kvindex/kvindex/tier"
)

type shape struct{ TopK, MinScore uint64 }

// TestTrimKeepsThePrefixOfTheDocumentedOrder: min_score drops the ranks scoring below it, top_k
// keeps the first k of what is left (ties already ordered by worker_id, dp_rank), 0 means no
// limit, and a limit beyond the answer keeps it whole.
func TestTrimKeepsThePrefixOfTheDocumentedOrder(t *testing.T) {
	answer := []tier.Score{ // as FindMatches orders it: score desc, worker_id, dp_rank asc
		{Score: index.Score{WorkerID: 3, Score: 3, TreeSize: 3}},
		{Score: index.Score{WorkerID: 1, DPRank: 0, Score: 2, TreeSize: 2}},
		{Score: index.Score{WorkerID: 1, DPRank: 1, Score: 2, TreeSize: 2}},
		{Score: index.Score{WorkerID: 2, Score: 2, TreeSize: 2}},
		{Score: index.Score{WorkerID: 4, Score: 1, TreeSize: 1}},
		{Score: index.Score{WorkerID: 5, Score: 0}, Ext: [3]uint32{2, 0, 0}}, // lower-tier hits only: last
	}
	for _, c := range []struct {
		name  string
		shape shape
		want  int // the answer's first want entries
	}{
		{"no limits", shape{}, 6},
		{"top_k 0 is all", shape{TopK: 0}, 6},
		{"top_k 1", shape{TopK: 1}, 1},
		{"top_k cuts inside a tie by worker_id, dp_rank", shape{TopK: 3}, 3},
		{"top_k equal to the answer", shape{TopK: 6}, 6},
		{"top_k larger than the answer", shape{TopK: 1000}, 6},
		{"min_score 0 is all", shape{MinScore: 0}, 6},
		{"min_score 1 drops the ranks with lower-tier hits only", shape{MinScore: 1}, 5},
		{"min_score keeps the whole tie at it", shape{MinScore: 2}, 4},
		{"min_score 3", shape{MinScore: 3}, 1},
		{"min_score above every score", shape{MinScore: 4}, 0},
		{"min_score above 2^32", shape{MinScore: 1 << 40}, 0},
		{"min_score then top_k", shape{MinScore: 2, TopK: 2}, 2},
		{"top_k larger than what min_score leaves", shape{MinScore: 3, TopK: 2}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			plain := make([]index.Score, len(answer))
			for i := range answer {
				plain[i] = answer[i].Score
			}
			got := answer[:trimmed(plain, c.shape.MinScore, c.shape.TopK)]
			if !reflect.DeepEqual(got, answer[:c.want]) {
				t.Fatalf("trim(%+v) = %+v, want %+v", c.shape, got, answer[:c.want])
			}
		})
	}
	if got := trimmed(nil, 2, 3); got != 0 {
		t.Fatalf("trim of an empty answer = %+v", got)
	}
}
