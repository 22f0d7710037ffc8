package recovery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kvindex/kvindex/event"
)

// FetcherOptions configure a Fetcher. Zero fields take the documented defaults.
type FetcherOptions struct {
	// Client sends the requests. Default: a new http.Client (the default transport).
	Client *http.Client
	// Tries is how many times one page is tried on a transport error, a 5xx or a 429.
	// Default 8 (docs/CONTRACT.md §5).
	Tries int
	// BaseBackoff is the wait before the second try; it doubles for every further try
	// (200 ms·2^n). Default 200 ms.
	BaseBackoff time.Duration
	// MaxConcurrent bounds the fetches in flight at once, across all ranks; Fetch waits for a
	// slot. Default 16 (docs/CONTRACT.md §5).
	MaxConcurrent int
	// RequestTimeout bounds one HTTP try (request and body). Default 10 s.
	RequestTimeout time.Duration
	// MaxAnswerBytes bounds one answer body; a larger one is ErrBadAnswer. Default 1 GiB.
	MaxAnswerBytes int64
	// Logger gets one Warn line per failed try (keys worker_id, dp_rank, try, err).
	// Default: discard.
	Logger *slog.Logger
	// AuthToken, when set, is sent as `Authorization: Bearer <token>` with every request (an
	// upstream started with --auth-token-file). Default: none.
	AuthToken string
	// Partition names a rank's partition on the wire (model_name, routing_group) from its local
	// id; nil, or ok false, names none (the upstream finds the worker's own partition). Partition
	// ids are local to a process, so a fetch names the partition and the answer's events are
	// taken as of the fetched rank's own partition.
	Partition func(id uint32) (model, group string, ok bool)
}

// The defaults of FetcherOptions.
const (
	DefaultTries          = 8
	DefaultBaseBackoff    = 200 * time.Millisecond
	DefaultMaxConcurrent  = 16
	DefaultRequestTimeout = 10 * time.Second
	DefaultMaxAnswerBytes = 1 << 30
)

// Fetcher is the router's client of the range route GET {base}/v1/ranks/{w}/{r}/events of an
// upstream kvindex. It starts no goroutine; it is safe for concurrent use.
type Fetcher struct {
	client   *http.Client
	tries    int
	backoff  time.Duration
	timeout  time.Duration
	maxBytes int64
	log      *slog.Logger
	token    string
	part     func(id uint32) (model, group string, ok bool)
	sem      chan struct{}
}

// NewFetcher returns a Fetcher with opts (defaults filled in).
func NewFetcher(opts FetcherOptions) *Fetcher {
	f := &Fetcher{
		client:   opts.Client,
		tries:    opts.Tries,
		backoff:  opts.BaseBackoff,
		timeout:  opts.RequestTimeout,
		maxBytes: opts.MaxAnswerBytes,
		log:      opts.Logger,
		token:    opts.AuthToken,
		part:     opts.Partition,
	}
	if f.client == nil {
		f.client = &http.Client{}
	}
	if f.tries < 1 {
		f.tries = DefaultTries
	}
	if f.backoff <= 0 {
		f.backoff = DefaultBaseBackoff
	}
	if f.timeout <= 0 {
		f.timeout = DefaultRequestTimeout
	}
	if f.maxBytes <= 0 {
		f.maxBytes = DefaultMaxAnswerBytes
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	n := opts.MaxConcurrent
	if n < 1 {
		n = DefaultMaxConcurrent
	}
	f.sem = make(chan struct{}, n)
	return f
}

// Fetch asks the upstream at baseURL for rank r's events from start (nil: a TreeDump, the full
// restore). limit > 0 is sent as the page size; an Events answer that fills a page is followed
// by the next page from last_event_id+1 until a short page, a TooNew (caught up) or a TreeDump
// (the range was compacted meanwhile: the dump is returned instead). If a later page fails, the
// pages gathered so far are returned: they are a valid, shorter answer.
//
// Each page is tried up to Tries times on transport errors, 5xx and 429, waiting BaseBackoff·2^n
// between tries. Fetch holds one of MaxConcurrent slots from start to end and honours ctx
// throughout. On failure it returns Answer{Kind: AnswerFailed, Err: err} and err, which wraps
// ErrGaveUp, ErrUpstreamStatus, ErrBadAnswer or ctx's error.
func (f *Fetcher) Fetch(ctx context.Context, baseURL string, r event.Rank, start *uint64, limit int) (Answer, error) {
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return failed(fmt.Errorf("recovery: fetch %v: waiting for a slot: %w", r, ctx.Err()))
	}
	defer func() { <-f.sem }()

	base := strings.TrimRight(baseURL, "/") + "/v1/ranks/" + strconv.FormatUint(r.WorkerID, 10) + "/" +
		strconv.FormatUint(uint64(r.DPRank), 10) + "/events"
	var acc Answer
	for page := 0; ; page++ {
		a, err := f.page(ctx, base, r, start, limit)
		if err != nil {
			if page > 0 && ctx.Err() == nil {
				f.log.Warn("range fetch: returning the pages gathered", "worker_id", r.WorkerID, "dp_rank", r.DPRank,
					"last_event_id", acc.LastEventID, "err", err)
				return acc, nil
			}
			return failed(err)
		}
		if page == 0 {
			if a.Kind != AnswerEvents || limit <= 0 || len(a.Events) < limit {
				return a, nil
			}
			acc = a
		} else {
			switch a.Kind {
			case AnswerTreeDump:
				return a, nil
			case AnswerEvents:
			default: // TooNew: caught up; InvalidRange cannot answer a range without end
				return acc, nil
			}
			if len(a.Events) > 0 && a.Events[0].EventID <= acc.LastEventID {
				return failed(fmt.Errorf("%w: page from %d starts at %d", ErrBadAnswer, *start, a.Events[0].EventID))
			}
			acc.Events = append(acc.Events, a.Events...)
			if a.LastEventID > acc.LastEventID {
				acc.LastEventID = a.LastEventID
			}
			if len(a.Events) < limit {
				return acc, nil
			}
		}
		if acc.LastEventID == ^uint64(0) {
			return acc, nil
		}
		next := acc.LastEventID + 1
		start = &next
	}
}

func failed(err error) (Answer, error) { return Answer{Kind: AnswerFailed, Err: err}, err }

// page fetches one page with retries.
func (f *Fetcher) page(ctx context.Context, base string, r event.Rank, start *uint64, limit int) (Answer, error) {
	q := url.Values{}
	if start != nil {
		q.Set("start", strconv.FormatUint(*start, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if f.part != nil && r.Partition != 0 {
		if model, group, ok := f.part(r.Partition); ok {
			q.Set("model_name", model)
			q.Set("routing_group", group)
		}
	}
	u := base
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var last error
	for try := 0; try < f.tries; try++ {
		if try > 0 {
			if err := sleep(ctx, f.backoff<<min(try-1, 30)); err != nil {
				return Answer{}, fmt.Errorf("recovery: fetch %s: %w (after %d tries: %w)", u, err, try, last)
			}
		}
		a, retry, err := f.once(ctx, u, r)
		if err == nil {
			return a, nil
		}
		if ctx.Err() != nil {
			return Answer{}, fmt.Errorf("recovery: fetch %s: %w", u, ctx.Err())
		}
		if !retry {
			return Answer{}, err
		}
		f.log.Warn("range fetch failed", "worker_id", r.WorkerID, "dp_rank", r.DPRank, "try", try+1, "err", err)
		last = err
	}
	return Answer{}, fmt.Errorf("%w: %s: %d tries: %w", ErrGaveUp, u, f.tries, last)
}

// once is one HTTP try; retry says whether a failure is worth another try.
func (f *Fetcher) once(ctx context.Context, u string, r event.Rank) (a Answer, retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Answer{}, false, fmt.Errorf("recovery: fetch %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/json")
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return Answer{}, true, fmt.Errorf("recovery: fetch %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, f.maxBytes+1))
	if err != nil {
		return Answer{}, true, fmt.Errorf("recovery: fetch %s: reading body: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		retry = resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests
		return Answer{}, retry, fmt.Errorf("%w: %s: %s: %s", ErrUpstreamStatus, u, resp.Status, snippet(body))
	}
	if int64(len(body)) > f.maxBytes {
		return Answer{}, false, fmt.Errorf("%w: %s: body larger than %d bytes", ErrBadAnswer, u, f.maxBytes)
	}
	a, err = DecodeAnswer(body)
	if err != nil {
		return Answer{}, false, fmt.Errorf("recovery: fetch %s: %w", u, err)
	}
	for i := range a.Events {
		ev := &a.Events[i]
		if ev.WorkerID != r.WorkerID || ev.DPRank != r.DPRank {
			return Answer{}, false, fmt.Errorf("%w: %s: event %d is of rank %d/%d", ErrBadAnswer, u, i, ev.WorkerID, ev.DPRank)
		}
		ev.Partition = r.Partition // the wire carries no partition id: the fetch named it
	}
	return a, false, nil
}

func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
