package server

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/kvindex/kvindex/event"
)

// bodyKind is the encoding of a request body, from its Content-Type.
type bodyKind uint8

const (
	bodyJSON    bodyKind = iota + 1 // application/json, text/json, form-urlencoded (curl -d), none
	bodyNDJSON                      // application/x-ndjson, application/ndjson, application/jsonl
	bodyMsgpack                     // application/msgpack, application/x-msgpack, application/vnd.msgpack
)

var mediaTypes = map[string]bodyKind{
	"": bodyJSON, "application/json": bodyJSON, "text/json": bodyJSON,
	// curl -d sends application/x-www-form-urlencoded: the body is JSON all the same.
	"application/x-www-form-urlencoded": bodyJSON,
	"application/x-ndjson":              bodyNDJSON, "application/ndjson": bodyNDJSON, "application/jsonl": bodyNDJSON,
	"application/msgpack": bodyMsgpack, "application/x-msgpack": bodyMsgpack, "application/vnd.msgpack": bodyMsgpack,
}

func (k bodyKind) String() string {
	switch k {
	case bodyJSON:
		return "application/json"
	case bodyNDJSON:
		return "application/x-ndjson"
	case bodyMsgpack:
		return "application/msgpack"
	}
	return "?"
}

// readBody reads the body of a request whose Content-Type must be one of allowed (else 415) and
// whose Content-Encoding is none, identity or gzip (else 415). The limit applies to the body as
// sent and, for gzip, to the decoded body too. It answers 4xx itself and returns false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, allowed ...bodyKind) ([]byte, bodyKind, bool) {
	return s.readBodyTo(nil, w, r, allowed...)
}

// bodyBufs are the request-body buffers of the two hot routes (POST /v1/events and
// /v1/find_matches, readPooledBody): a 64-event batch is ~70 KB, which io.ReadAll read by
// doubling from 512 bytes (about 256 KB allocated and copied per request, a third of what the
// server allocated during an HTTP ingest).
var bodyBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBody bounds the buffers bodyBufs keeps: a rare huge body is not held for the next.
const maxPooledBody = 1 << 20

// readPooledBody is readBody into a pooled buffer; release(body) hands it back once nothing
// refers to the body any more (the decoders copy what they keep). On false there is nothing to
// release.
func (s *Server) readPooledBody(w http.ResponseWriter, r *http.Request, allowed ...bodyKind) ([]byte, bodyKind, bool) {
	bp := bodyBufs.Get().(*[]byte)
	body, kind, ok := s.readBodyTo((*bp)[:0], w, r, allowed...)
	if !ok {
		bodyBufs.Put(bp)
		return nil, 0, false
	}
	*bp = body[:0]
	return body, kind, true
}

// releaseBody returns a body of readPooledBody to the pool.
func releaseBody(body []byte) {
	if cap(body) == 0 || cap(body) > maxPooledBody {
		return
	}
	b := body[:0]
	bodyBufs.Put(&b)
}

// readBodyTo is readBody appending to dst.
func (s *Server) readBodyTo(dst []byte, w http.ResponseWriter, r *http.Request, allowed ...bodyKind) ([]byte, bodyKind, bool) {
	ct := r.Header.Get("Content-Type")
	kind, known := plainMediaType(ct)
	if !known {
		mt := ct
		if ct != "" {
			var err error
			if mt, _, err = mime.ParseMediaType(ct); err != nil {
				writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("malformed Content-Type %q", ct))
				return nil, 0, false
			}
		}
		kind, known = mediaTypes[strings.ToLower(mt)]
	}
	if !known || !slices.Contains(allowed, kind) {
		names := make([]string, len(allowed))
		for i, k := range allowed {
			names[i] = k.String()
		}
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("unsupported Content-Type %q (want %s)", ct, strings.Join(names, ", ")))
		return nil, 0, false
	}
	var src io.Reader = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	src = s.paceBody(w, src)
	size := r.ContentLength // the body as sent: its size when the client said it
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	default:
		switch enc = strings.ToLower(strings.TrimSpace(enc)); enc {
		case "", "identity":
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(src)
			if err != nil {
				s.bodyError(w, err)
				return nil, 0, false
			}
			defer zr.Close()
			src = http.MaxBytesReader(w, io.NopCloser(zr), s.cfg.MaxBodyBytes)
			size = -1
		default:
			writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("unsupported Content-Encoding %q (want gzip or none)", enc))
			return nil, 0, false
		}
	}
	if size > s.cfg.MaxBodyBytes {
		size = -1 // the limit answers it, after reading up to the limit as before
	}
	body, err := readAll(dst, src, size)
	if err != nil {
		s.bodyError(w, err)
		return nil, 0, false
	}
	return body, kind, true
}

// plainMediaType maps a Content-Type that is exactly one of mediaTypes' names (no parameters,
// lower case: what clients send) without mime.ParseMediaType, which allocates its parameter map
// on every request; anything else is not known here and takes the parsing path.
func plainMediaType(ct string) (bodyKind, bool) {
	if strings.IndexByte(ct, ';') >= 0 {
		return 0, false
	}
	k, ok := mediaTypes[ct]
	return k, ok
}

// readAll reads src to its end, appending to dst, as io.ReadAll does; size, when not negative,
// is the length src announced (Content-Length), so the buffer is grown once, to it and a byte
// for the read that finds the end, and not by doubling.
func readAll(dst []byte, src io.Reader, size int64) ([]byte, error) {
	if size >= 0 {
		dst = slices.Grow(dst, int(size)+1)
	}
	for {
		if len(dst) == cap(dst) {
			dst = slices.Grow(dst, max(512, cap(dst))) // more than announced: double, as io.ReadAll
		}
		n, err := src.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// bodyError answers a failed body read: 413 over the limit, else 400 (a truncated or corrupt
// body, or bad gzip).
func (s *Server) bodyError(w http.ResponseWriter, err error) {
	var mbe *http.MaxBytesError
	switch {
	case slowBody(err):
		s.conns.slow.Add(1)
		writeError(w, http.StatusRequestTimeout, fmt.Sprintf("the body arrived slower than %d KiB per %v (--body-timeout)", BodyChunk>>10, s.cfg.Conns.BodyTimeout))
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body exceeds the limit of %d bytes (decoded, when gzip-encoded) set by --max-body-bytes: post smaller batches, or raise --max-body-bytes", s.cfg.MaxBodyBytes))
	case errors.Is(err, gzip.ErrHeader), errors.Is(err, gzip.ErrChecksum), errors.Is(err, io.ErrUnexpectedEOF):
		writeError(w, http.StatusBadRequest, "the body is not complete, valid gzip: "+strings.TrimPrefix(err.Error(), "gzip: "))
	default:
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
	}
}

// decodeEvents decodes a POST /v1/events body of the given kind, decoded, validated and
// key-checked in one pass (event.DecodeJSONBatchKeys, DecodeNDJSONKeys, DecodeMsgpackBatchKeys):
// a field kvindex does not know is refused with --strict, else counted and logged once per field
// name; JSON keys repeated in one object are refused.
func (s *Server) decodeEvents(body []byte, kind bodyKind) ([]event.RouterEvent, error) {
	var (
		evs []event.RouterEvent
		err error
	)
	switch kind {
	case bodyMsgpack:
		evs, err = event.DecodeMsgpackBatchKeys(body, s.unknownField)
	case bodyNDJSON:
		evs, err = event.DecodeNDJSONKeys(body, s.unknownField)
	default:
		evs, err = event.DecodeJSONBatchKeys(body, s.unknownField)
		if err != nil && strings.Contains(err.Error(), "after top-level value") {
			// Most often NDJSON posted with curl -d, which strips the newlines between the lines.
			err = fmt.Errorf("%w (the body is several JSON values: post NDJSON with Content-Type: application/x-ndjson and, with curl, --data-binary, since -d strips newlines)", err)
		}
	}
	if err != nil {
		return nil, err
	}
	return evs, nil
}

// errStrictUnknown is what --strict answers for a field kvindex does not know.
var errStrictUnknown = fmt.Errorf("%w (the server runs with --strict)", event.ErrUnknownField)

// unknownField is CheckKeys' callback: an error under --strict, else counted and logged the
// first time its name is seen.
func (s *Server) unknownField(index int, field string) error {
	if s.cfg.Strict {
		return errStrictUnknown
	}
	s.unknownFields.Add(1)
	name := event.FieldName(field)
	if _, seen := s.unknownNames.LoadOrStore(name, struct{}{}); !seen {
		s.lg.Warn("events carry a field kvindex does not know; ignored (logged once per field; --strict refuses them)",
			"field", name, "event_index", index)
	}
	return nil
}

// UnknownFields is the number of unknown fields ignored in posted events (each occurrence in
// each event counts) since the server started: the value of an unknown-fields metric.
func (s *Server) UnknownFields() uint64 { return s.unknownFields.Load() }

// findRequest is the body of POST /v1/find_matches.
type findRequest struct {
	BlockHashes *[]uint64 `json:"block_hashes"`
	EarlyExit   bool      `json:"early_exit"`
	DeviceOnly  bool      `json:"device_only"`
	partitionNames
	answerShape
}

// decodeFindRequest decodes a find_matches body: the bodies routers send (known keys, each once,
// plain values) in one pass without reflection (findReader), any other through decodeStrict,
// whose answers and errors are the contract's.
func decodeFindRequest(body []byte, req *findRequest) error {
	r := findReader{b: body}
	if r.request(req) {
		return nil
	}
	*req = findRequest{}
	return decodeStrict(body, req)
}

// findReader reads a find_matches body of the plain form and gives up (false) on anything
// else, for decodeStrict to judge: a key that is not one of the request's exactly (unknown,
// another case, escaped) or comes twice, a null, a number that is not a plain unsigned integer
// literal that fits, a string with an escape or a byte outside printable ASCII. What it accepts
// is valid JSON that encoding/json decodes to the same request (FuzzDecodeFindRequest).
type findReader struct {
	b []byte
	i int
}

func (r *findReader) ws() {
	for r.i < len(r.b) && (r.b[r.i] == ' ' || r.b[r.i] == '\t' || r.b[r.i] == '\n' || r.b[r.i] == '\r') {
		r.i++
	}
}

func (r *findReader) eat(c byte) bool {
	r.ws()
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	return false
}

var findKeys = []string{"block_hashes", "early_exit", "device_only", "model_name", "routing_group", "tenant_id", "top_k", "min_score"}

func (r *findReader) request(req *findRequest) bool {
	if !r.eat('{') {
		return false
	}
	var seen uint16
	if !r.eat('}') {
		for {
			k, ok := r.str()
			if !ok || !r.eat(':') {
				return false
			}
			i := slices.Index(findKeys, string(k))
			if i < 0 || seen&(1<<i) != 0 || !r.value(i, req) {
				return false
			}
			seen |= 1 << i
			if !r.eat(',') {
				if !r.eat('}') {
					return false
				}
				break
			}
		}
	}
	r.ws()
	return r.i == len(r.b)
}

func (r *findReader) value(key int, req *findRequest) bool {
	var ok bool
	switch key {
	case 0:
		hs := make([]uint64, 0, 64)
		if !r.eat('[') {
			return false
		}
		if !r.eat(']') {
			for {
				h, ok := r.uint()
				if !ok {
					return false
				}
				hs = append(hs, h)
				if !r.eat(',') {
					if !r.eat(']') {
						return false
					}
					break
				}
			}
		}
		req.BlockHashes = &hs
		return true
	case 1:
		req.EarlyExit, ok = r.bool()
	case 2:
		req.DeviceOnly, ok = r.bool()
	case 3:
		req.ModelName, ok = r.text()
	case 4:
		req.RoutingGroup, ok = r.text()
	case 5:
		req.TenantID, ok = r.text()
	case 6:
		req.TopK, ok = r.uint()
	default:
		req.MinScore, ok = r.uint()
	}
	return ok
}

// str reads a string of printable ASCII without escapes.
func (r *findReader) str() ([]byte, bool) {
	if !r.eat('"') {
		return nil, false
	}
	start := r.i
	for r.i < len(r.b) {
		switch c := r.b[r.i]; {
		case c == '"':
			r.i++
			return r.b[start : r.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
		r.i++
	}
	return nil, false
}

func (r *findReader) text() (string, bool) {
	s, ok := r.str()
	return string(s), ok
}

func (r *findReader) bool() (bool, bool) {
	r.ws()
	switch {
	case bytes.HasPrefix(r.b[r.i:], []byte("true")):
		r.i += 4
		return true, true
	case bytes.HasPrefix(r.b[r.i:], []byte("false")):
		r.i += 5
		return false, true
	}
	return false, false
}

// uint reads a plain unsigned integer literal (digits, no leading zero, fraction or exponent)
// that fits in 64 bits.
func (r *findReader) uint() (uint64, bool) {
	r.ws()
	start := r.i
	var v uint64
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		d := uint64(r.b[r.i] - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
		r.i++
	}
	n := r.i - start
	if n == 0 || (n > 1 && r.b[start] == '0') || (r.i < len(r.b) && (r.b[r.i] == '.' || r.b[r.i] == 'e' || r.b[r.i] == 'E')) {
		return 0, false
	}
	return v, true
}
