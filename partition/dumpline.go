package partition

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Partition lines: how an NDJSON stream of RouterEvents (GET /v1/dump without a partition,
// `kvindex export`, POST /v1/events) says which partition its events belong to. A line
//
//	{"partition":{"model_name":"llama","routing_group":"default","block_size":32}}
//
// sets the partition (and, when the partition is created by the stream, its block size) of the
// event lines that follow it, up to the next partition line. Event lines before the first
// partition line belong to the partition the request names (query parameters), else the
// default one. So a whole-index dump is replayable as it is: POST it to /v1/events as NDJSON.

// ErrBadPartitionLine: a partition line that does not parse or names no valid partition.
var ErrBadPartitionLine = errors.New("partition: bad partition line")

// lineHeader is the JSON shape of a partition line.
type lineHeader struct {
	Partition *struct {
		ModelName    string `json:"model_name"`
		RoutingGroup string `json:"routing_group"`
		BlockSize    int    `json:"block_size"`
	} `json:"partition"`
}

var linePrefix = []byte(`{"partition":`)

// AppendLine appends p's partition line (with its newline).
func AppendLine(dst []byte, k Key, blockSize int) []byte {
	h := struct {
		Partition struct {
			ModelName    string `json:"model_name"`
			RoutingGroup string `json:"routing_group"`
			BlockSize    int    `json:"block_size"`
		} `json:"partition"`
	}{}
	h.Partition.ModelName, h.Partition.RoutingGroup, h.Partition.BlockSize = k.ModelName, k.RoutingGroup, blockSize
	b, _ := json.Marshal(h) // cannot fail: strings and an int
	dst = append(dst, b...)
	return append(dst, '\n')
}

// Segment is a run of event lines of one partition in an NDJSON stream. Named is false for the
// lines before the first partition line (the request's partition); BlockSize 0 means the
// stream does not say.
type Segment struct {
	Named     bool
	Key       Key
	BlockSize int
	Body      []byte // the event lines, as they were
	FirstLine int    // 0-based line number of Body's first line in the stream
}

// IsLine reports whether an NDJSON line (leading blanks allowed) is a partition line.
func IsLine(line []byte) bool {
	return bytes.HasPrefix(bytes.TrimLeft(line, " \t\r"), linePrefix)
}

// Split cuts an NDJSON body at its partition lines. A body without any is one unnamed segment.
func Split(body []byte) ([]Segment, error) {
	if !bytes.Contains(body, linePrefix) {
		return []Segment{{Body: body}}, nil
	}
	var out []Segment
	cur := Segment{}
	start, line := 0, 0
	for pos := 0; pos < len(body); line++ {
		end := bytes.IndexByte(body[pos:], '\n')
		next := len(body)
		if end >= 0 {
			next = pos + end + 1
		}
		ln := body[pos:next]
		if IsLine(ln) {
			cur.Body = body[start:pos]
			if len(bytes.TrimSpace(cur.Body)) > 0 || cur.Named {
				out = append(out, cur)
			}
			var h lineHeader
			dec := json.NewDecoder(bytes.NewReader(ln))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&h); err != nil || h.Partition == nil {
				return nil, fmt.Errorf("%w: line %d: %v", ErrBadPartitionLine, line+1, err)
			}
			k := KeyOf(h.Partition.ModelName, h.Partition.RoutingGroup, "")
			if err := k.check(); err != nil {
				return nil, fmt.Errorf("%w: line %d: %w", ErrBadPartitionLine, line+1, err)
			}
			if h.Partition.BlockSize < 0 {
				return nil, fmt.Errorf("%w: line %d: block_size %d", ErrBadPartitionLine, line+1, h.Partition.BlockSize)
			}
			cur = Segment{Named: true, Key: k, BlockSize: h.Partition.BlockSize, FirstLine: line + 1}
			start = next
		}
		pos = next
	}
	cur.Body = body[start:]
	if len(bytes.TrimSpace(cur.Body)) > 0 || cur.Named {
		out = append(out, cur)
	}
	return out, nil
}
