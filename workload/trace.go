package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrBadTrace is returned (wrapped, with the 1-based line number) by LoadTrace when a line is not
// a valid Mooncake trace record: not a JSON object, a missing field, a negative number, a hash id
// that is not an exact unsigned 64-bit integer.
var ErrBadTrace = errors.New("bad trace")

// ErrScale is returned by Scale (and Generate) when the trace cannot be copied k times with
// disjoint hash ids: k < 1, or a hash id of at least ScaleOffset when k > 1.
var ErrScale = errors.New("cannot scale trace")

// ScaleOffset is what copy c of a scaled trace adds to every hash id, times c (docs/BENCHMARKS.md stage 1).
const ScaleOffset uint64 = 1_000_000_000

// Request is one record of a Mooncake trace (kvcache-ai/Mooncake FAST'25 release, JSONL).
type Request struct {
	Timestamp    int64    // arrival time in ms from the start of the trace
	InputLength  int      // prompt tokens
	OutputLength int      // generated tokens
	HashIDs      []uint64 // one id per 512-token prompt block; equal ids mean equal prefixes
}

// traceLine is the wire shape of one trace record; pointers tell absent from zero.
type traceLine struct {
	Timestamp    *int64    `json:"timestamp"`
	InputLength  *int      `json:"input_length"`
	OutputLength *int      `json:"output_length"`
	HashIDs      *[]uint64 `json:"hash_ids"`
}

// maxTraceLine bounds one trace line (a prompt of 2^20 blocks is far beyond any real trace).
const maxTraceLine = 16 << 20

// LoadTrace reads a Mooncake JSONL trace: one JSON object a line with `timestamp` (ms),
// `input_length`, `output_length` and `hash_ids`, all required; unknown fields are ignored and
// blank lines skipped. The first bad line fails the whole load with an error that wraps
// ErrBadTrace and starts with "trace line N:". Requests are returned in file order.
func LoadTrace(r io.Reader) ([]Request, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxTraceLine)
	var out []Request
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		req, err := parseTraceLine(line)
		if err != nil {
			return nil, fmt.Errorf("trace line %d: %w: %v", lineNo, ErrBadTrace, err)
		}
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace line %d: %w: %v", lineNo+1, ErrBadTrace, err)
	}
	return out, nil
}

func parseTraceLine(line []byte) (Request, error) {
	var tl traceLine
	if err := json.Unmarshal(line, &tl); err != nil {
		return Request{}, err
	}
	switch {
	case tl.Timestamp == nil:
		return Request{}, errors.New("missing timestamp")
	case tl.InputLength == nil:
		return Request{}, errors.New("missing input_length")
	case tl.OutputLength == nil:
		return Request{}, errors.New("missing output_length")
	case tl.HashIDs == nil:
		return Request{}, errors.New("missing hash_ids")
	case *tl.Timestamp < 0:
		return Request{}, fmt.Errorf("negative timestamp %d", *tl.Timestamp)
	case *tl.InputLength < 0:
		return Request{}, fmt.Errorf("negative input_length %d", *tl.InputLength)
	case *tl.OutputLength < 0:
		return Request{}, fmt.Errorf("negative output_length %d", *tl.OutputLength)
	}
	ids := *tl.HashIDs
	if ids == nil {
		ids = []uint64{}
	}
	return Request{
		Timestamp:    *tl.Timestamp,
		InputLength:  *tl.InputLength,
		OutputLength: *tl.OutputLength,
		HashIDs:      ids,
	}, nil
}

// LoadTraceFile is LoadTrace on the file at path; errors name the path.
func LoadTraceFile(path string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load trace: %w", err)
	}
	defer f.Close()
	reqs, err := LoadTrace(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return reqs, nil
}

// Scale returns k disjoint copies of a trace (docs/BENCHMARKS.md `--scale`): copy c is reqs with c ×
// ScaleOffset added to every hash id and the same timestamps and lengths; copy 0 shares nothing
// with reqs (every slice is fresh). Each copy is served by its own workers in Generate (copy c
// by workers c·Workers … (c+1)·Workers−1). It fails with ErrScale when k < 1, or when k > 1 and
// some hash id is ≥ ScaleOffset (the copies would share ids).
func Scale(reqs []Request, k int) ([][]Request, error) {
	if err := checkScale(reqs, k); err != nil {
		return nil, err
	}
	total := 0
	for _, r := range reqs {
		total += len(r.HashIDs)
	}
	copies := make([][]Request, k)
	for c := range copies {
		off := uint64(c) * ScaleOffset
		slab := make([]uint64, 0, total) // one allocation per copy; each request gets a full-capacity window
		cp := make([]Request, len(reqs))
		for i, r := range reqs {
			start := len(slab)
			for _, id := range r.HashIDs {
				slab = append(slab, id+off)
			}
			r.HashIDs = slab[start:len(slab):len(slab)]
			cp[i] = r
		}
		copies[c] = cp
	}
	return copies, nil
}

// checkScale is Scale's refusal: k < 1, or k > 1 and a hash id ≥ ScaleOffset.
func checkScale(reqs []Request, k int) error {
	if k < 1 {
		return fmt.Errorf("%w: k = %d, want ≥ 1", ErrScale, k)
	}
	if k > 1 {
		for i, r := range reqs {
			for _, id := range r.HashIDs {
				if id >= ScaleOffset {
					return fmt.Errorf("%w: request %d has hash id %d ≥ %d", ErrScale, i, id, ScaleOffset)
				}
			}
		}
	}
	return nil
}
