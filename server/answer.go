package server

import (
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/kvindex/kvindex/engine"
)

// answerShape holds the request fields that shrink a find_matches answer (docs/API.md extensions):
// min_score drops the ranks scoring below it, then top_k keeps the first k of what is left in
// the documented order (score desc, worker_id, dp_rank asc); 0 means no limit for both.
type answerShape struct {
	TopK     uint64 `json:"top_k"`
	MinScore uint64 `json:"min_score"`
}

// msgpackType is the Content-Type of a msgpack answer.
const msgpackType = "application/msgpack"

// wantsMsgpack reports whether the request's Accept header asks for a msgpack answer: it names
// application/msgpack (or application/x-msgpack, application/vnd.msgpack) with q > 0, and does
// not name application/json with a higher q.
func wantsMsgpack(r *http.Request) bool {
	accept := r.Header.Values("Accept")
	if len(accept) == 0 {
		return false
	}
	var qMsgpack, qJSON float64
	for _, h := range accept {
		for part := range strings.SplitSeq(h, ",") {
			mt, params, err := mime.ParseMediaType(part)
			if err != nil {
				continue
			}
			q := 1.0
			if v, ok := params["q"]; ok {
				if q, err = strconv.ParseFloat(v, 64); err != nil {
					continue
				}
			}
			switch mt {
			case msgpackType, "application/x-msgpack", "application/vnd.msgpack":
				qMsgpack = max(qMsgpack, q)
			case "application/json":
				qJSON = max(qJSON, q)
			}
		}
	}
	return qMsgpack > 0 && qMsgpack >= qJSON
}

// appendAnswerMsgpack appends the find_matches answer as a msgpack map with the JSON answer's
// keys and shape: "scores" (maps with worker_id, dp_rank, score, tree_size) and, when
// withHashes, "block_hashes". Integers take their smallest encoding.
func appendAnswerMsgpack(dst []byte, a *engine.Answer, hashes []uint64, withHashes bool) []byte {
	if withHashes {
		dst = append(dst, 0x82) // fixmap, 2 entries
	} else {
		dst = append(dst, 0x81)
	}
	dst = append(dst, "\xa6scores"...)
	dst = appendMPArrayLen(dst, len(a.Scores))
	for i := range a.Scores {
		x := &a.Scores[i]
		ext := a.ExtOf(i)
		if ext != (engine.Ext{}) {
			dst = append(dst, 0x85) // fixmap, 5 entries: "tiers" too
		} else {
			dst = append(dst, 0x84)
		}
		dst = append(dst, "\xa9worker_id"...)
		dst = appendMPUint(dst, x.WorkerID)
		dst = append(dst, "\xa7dp_rank"...)
		dst = appendMPUint(dst, uint64(x.DPRank))
		dst = append(dst, "\xa5score"...)
		dst = appendMPUint(dst, uint64(x.Score))
		dst = append(dst, "\xa9tree_size"...)
		dst = appendMPUint(dst, x.TreeSize)
		if ext != (engine.Ext{}) {
			dst = appendTiersMsgpack(append(dst, "\xa5tiers"...), &ext)
		}
	}
	if withHashes {
		dst = append(dst, "\xacblock_hashes"...)
		dst = appendMPArrayLen(dst, len(hashes))
		for _, h := range hashes {
			dst = appendMPUint(dst, h)
		}
	}
	return dst
}

func appendMPArrayLen(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return append(dst, 0xdc, byte(n>>8), byte(n))
	}
	return append(dst, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func appendMPUint(dst []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return append(dst, 0xcd, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return append(dst, 0xce, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return append(dst, 0xcf, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}
