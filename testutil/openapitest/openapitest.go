package openapitest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/kvindex/kvindex/openapi"
	"github.com/vmihailenco/msgpack/v5"
)

// Validator checks exchanges against the OpenAPI document.
type Validator struct {
	doc     *openapi3.T    // as written, for Operations
	router  routers.Router // requests: the document as written
	answers routers.Router // answers: a copy whose object schemas are closed (strictAnswers)
	opts    *openapi3filter.Options
}

var registerDecoders = sync.OnceFunc(func() {
	// The server reads curl's form type as JSON (docs/API.md "Request bodies"), NDJSON as one
	// JSON value a line (the document describes it as the array of its lines), msgpack with the
	// JSON shape, and the status page is HTML text.
	openapi3filter.RegisterBodyDecoder("application/x-www-form-urlencoded", openapi3filter.JSONBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", ndjsonDecoder)
	openapi3filter.RegisterBodyDecoder("application/msgpack", msgpackDecoder)
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
})

// New loads the document of package openapi.
func New() (*Validator, error) {
	registerDecoders()
	doc, r, err := load(nil)
	if err != nil {
		return nil, err
	}
	_, answers, err := load(strictAnswers)
	if err != nil {
		return nil, err
	}
	opts := &openapi3filter.Options{
		// The document says which routes take the bearer token; whether this server wants one is
		// its configuration, and the 401 answers are validated like any other.
		AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
		MultiError:         true,
	}
	// "at /0/worker_id: <reason>" rather than the schema and the whole value (the error names
	// the body beside it).
	opts.WithCustomSchemaErrorFunc(func(e *openapi3.SchemaError) string {
		if e.Reason == "" {
			return ""
		}
		return "at /" + strings.Join(e.JSONPointer(), "/") + ": " + e.Reason
	})
	return &Validator{doc: doc, router: r, answers: answers, opts: opts}, nil
}

// load loads, validates and routes the document of package openapi, after adjust when given.
func load(adjust func(*openapi3.T)) (*openapi3.T, routers.Router, error) {
	b, err := openapi.JSON()
	if err != nil {
		return nil, nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		return nil, nil, fmt.Errorf("loading the OpenAPI document: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, nil, fmt.Errorf("the OpenAPI document is invalid: %w", err)
	}
	if adjust != nil {
		adjust(doc)
	}
	doc.Servers = nil // match paths on any host: test servers listen on random ports
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("routing the OpenAPI document: %w", err)
	}
	return doc, r, nil
}

// Operations returns every operation of the document as "METHOD /path", sorted.
func (v *Validator) Operations() []string {
	var ops []string
	for path, item := range v.doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// Check validates one exchange: req as sent with reqBody, and resp with respBody (both read
// whole; req.Body and resp.Body are not read). It returns nil when both conform.
func (v *Validator) Check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) error {
	return v.check(req, reqBody, resp, respBody, nil)
}

// check is Check, telling seen the operation ("METHOD /path") the exchange was routed to.
func (v *Validator) check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte, seen func(op string)) error {
	name := req.Method + " " + req.URL.Path
	fail := func(format string, args ...any) error {
		// JSON Schema reports a field that unevaluatedProperties: false refuses as a "false schema".
		msg := strings.ReplaceAll(fmt.Sprintf(format, args...), "': false schema", "': a field the document does not describe")
		return fmt.Errorf("openapi: %s → %d: %s", name, resp.StatusCode, msg)
	}
	ctx := context.Background()
	route, params, err := v.router.FindRoute(req)
	if err == nil && seen != nil {
		seen(route.Method + " " + route.Path)
	}
	if err != nil {
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			return fail("the route is not in openapi/openapi.yaml (%v)", err)
		}
		var e struct {
			Error *string `json:"error"`
		}
		if json.Unmarshal(respBody, &e) != nil || e.Error == nil {
			return fail("an unrouted request's answer is not the error JSON: %.200q", respBody)
		}
		return nil
	}
	in := &openapi3filter.RequestValidationInput{Request: validationRequest(req, reqBody), PathParams: params, Route: route, Options: v.opts}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && resp.StatusCode < 400 {
		return fail("the document refuses the request, the server accepted it: %v", err)
	}
	in.Request = validationRequest(req, reqBody) // ValidateRequest consumed the body
	if in.Route, in.PathParams, err = v.answers.FindRoute(in.Request); err != nil {
		return fail("the route is in the document but not in its strict copy: %v", err)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(respBody)), Options: v.opts,
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fail("the answer does not match the document: %v (body %.300q)", err, respBody)
	}
	return nil
}

// validationRequest is a copy of req with reqBody as the body, decoded as the server decodes
// it: gzip Content-Encoding undone, and a body without a Content-Type read as JSON.
func validationRequest(req *http.Request, reqBody []byte) *http.Request {
	r := req.Clone(context.Background())
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		if zr, err := gzip.NewReader(bytes.NewReader(reqBody)); err == nil {
			if b, err := io.ReadAll(zr); err == nil {
				reqBody = b
				r.Header.Del("Content-Encoding")
			}
		}
	}
	if len(reqBody) > 0 && r.Header.Get("Content-Type") == "" {
		r.Header.Set("Content-Type", "application/json")
	}
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(reqBody)), nil }
	r.ContentLength = int64(len(reqBody))
	return r
}

func ndjsonDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	dec := json.NewDecoder(body)
	dec.UseNumber()
	lines := []any{}
	for {
		var v any
		if err := dec.Decode(&v); errors.Is(err, io.EOF) {
			return lines, nil
		} else if err != nil {
			return nil, &openapi3filter.ParseError{Kind: openapi3filter.KindInvalidFormat, Cause: err}
		}
		lines = append(lines, v)
	}
}

// msgpackDecoder decodes msgpack into the JSON shape (maps with string keys, JSON numbers).
func msgpackDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	var v any
	if err := msgpack.NewDecoder(body).Decode(&v); err != nil {
		return nil, &openapi3filter.ParseError{Kind: openapi3filter.KindInvalidFormat, Cause: err}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, &openapi3filter.ParseError{Kind: openapi3filter.KindInvalidFormat, Cause: err}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// Transport validates every exchange it carries (see the package doc).
type Transport struct {
	Base http.RoundTripper
	V    *Validator

	mu         sync.Mutex
	exchanges  int             // checked
	ops        map[string]bool // the operations exercised ("METHOD /path")
	violations []string
}

// RoundTrip sends req through Base, reads both bodies whole and checks the exchange.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	resp, err := t.Base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if err != nil {
		return resp, nil // the caller reads the truncated body and sees what it sees
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); resp.StatusCode == http.StatusSwitchingProtocols || mt == "text/event-stream" {
		return resp, nil
	}
	var op string
	verr := t.V.check(req, reqBody, resp, respBody, func(o string) { op = o })
	t.mu.Lock()
	if t.ops == nil {
		t.ops = map[string]bool{}
	}
	t.ops[op] = op != ""
	t.exchanges++
	if verr != nil {
		t.violations = append(t.violations, verr.Error())
	}
	t.mu.Unlock()
	if verr != nil {
		return nil, verr
	}
	return resp, nil
}

// Exchanges returns how many exchanges were checked so far.
func (t *Transport) Exchanges() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exchanges
}

// Unexercised returns the document's operations no exchange was routed to so far.
func (t *Transport) Unexercised() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, op := range t.V.Operations() {
		if !t.ops[op] {
			out = append(out, op)
		}
	}
	return out
}

// Violations returns every violation seen so far.
func (t *Transport) Violations() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.violations...)
}

// Install puts a validating Transport over http.DefaultTransport, so http.DefaultClient and
// every client without a transport of its own validate their exchanges; restore puts the
// previous transport back.
func Install() (t *Transport, restore func(), err error) {
	v, err := New()
	if err != nil {
		return nil, nil, err
	}
	prev := http.DefaultTransport
	t = &Transport{Base: prev, V: v}
	http.DefaultTransport = t
	return t, func() { http.DefaultTransport = prev }, nil
}

// Run runs a test binary's tests with a validating Transport installed (Install) and returns
// its exit code: m.Run's, or 1 when an exchange did not conform (each listed on stderr, so a
// violation inside a retry loop that ignores errors still fails the run). A TestMain calls
// os.Exit(openapitest.Run(m)).
func Run(m *testing.M) int {
	tr, restore, err := Install()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	restore()
	fmt.Fprintf(os.Stderr, "openapitest: %d HTTP exchanges checked against openapi/openapi.yaml; operations not exercised: %s\n",
		tr.Exchanges(), strings.Join(tr.Unexercised(), ", "))
	if vs := tr.Violations(); len(vs) > 0 {
		fmt.Fprintf(os.Stderr, "%d exchanges do not conform to openapi/openapi.yaml:\n  %s\n", len(vs), strings.Join(vs, "\n  "))
		code = 1
	}
	return code
}
