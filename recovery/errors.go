package recovery

import "errors"

// The error vocabulary of package recovery. Each is returned wrapped with context; test with
// errors.Is.
var (
	// ErrTooNew is the Decision.Failure of a recovery the upstream answered with TooNew: the
	// upstream's newest event is older than the requested start (it has not seen the events yet,
	// or it restarted with a new epoch).
	ErrTooNew = errors.New("upstream range is too new")

	// ErrInvalidRange is the Decision.Failure of a recovery the upstream answered with
	// InvalidRange (end before start).
	ErrInvalidRange = errors.New("upstream rejected the range as invalid")

	// ErrFetchFailed is the Decision.Failure of an AnswerFailed that carries no error of its own.
	ErrFetchFailed = errors.New("recovery fetch failed")

	// ErrBadAnswer is returned when an upstream answer is not exactly one of the four range
	// shapes (docs/API.md), carries an invalid event, names another rank than the one asked for, or
	// pages backwards.
	ErrBadAnswer = errors.New("malformed range answer")

	// ErrUpstreamStatus is returned when the upstream answers an HTTP status other than 200.
	// 5xx and 429 are retried; any other status is returned at once.
	ErrUpstreamStatus = errors.New("upstream answered an error status")

	// ErrGaveUp is returned by Fetcher.Fetch when every try failed with a retryable error; the
	// last error is wrapped too.
	ErrGaveUp = errors.New("gave up fetching range")

	// ErrNoSource is the Decision.Failure of a recovery whose source was removed while it was in
	// flight, or of buffered events found at restart for a rank that has no source any more.
	ErrNoSource = errors.New("the worker has no recovery source")
)
