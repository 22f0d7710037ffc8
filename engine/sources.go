package engine

import (
	"context"
	"fmt"
	"net/url"

	"github.com/kvindex/kvindex/event"
)

// Rank names one (partition, worker, dp rank).
type Rank = event.Rank

// CheckSourceURL refuses a recovery source that is not an absolute http(s) URL.
func CheckSourceURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("source url %q must be an absolute http(s) URL like http://host:7070", raw)
	}
	return nil
}

// Source is the kind of door that feeds a worker's ranks: accuracy is kept per partition and
// source kind (accuracy.go), and the event sources' doors (SourceDoor) renew source-implied
// leases (lease.go).
type Source string

// The source kinds. A worker's kind is the door its latest events came through, kept across
// restarts (SourceUnknown: none yet); routing decisions name a worker only when no event door
// did.
const (
	SourceUnknown   Source = "unknown"
	SourceLibrary   Source = "library"   // the Go library (and the benchmark): Ingest, IngestSized, Place
	SourceHTTP      Source = "http"      // POST /v1/events
	SourceZMQ       Source = "zmq"       // a vLLM ZMQ source (--zmq, POST /v1/sources)
	SourceDynamo    Source = "dynamo"    // a ZMQ source of Dynamo's /register
	SourceNATS      Source = "nats"      // a NATS Core or JetStream source
	SourcePeer      Source = "peer"      // a peer's dump (--peers bootstrap)
	SourceDecisions Source = "decisions" // routing decisions only (approximate mode)
)

// SourceDoor is the door of an event source (the vLLM ZMQ and NATS source managers' sink), and
// the only exported way to submit events placed by Place: its SubmitWithMeta also renews the
// source-implied lease of each worker it delivers events for (Config.SourceLease; lease.go).
// Every other method is the engine's.
type SourceDoor struct {
	*Engine
}

// SourceDoor returns the door the event sources submit through.
func (e *Engine) SourceDoor() SourceDoor { return SourceDoor{e} }

// SubmitWithMeta logs and applies events already placed by Place (one rank per call) and
// writes meta in the same log batch; with Config.SourceLease set, the records of the workers
// whose implied leases the events renew are written in that batch too (no write of their own).
func (d SourceDoor) SubmitWithMeta(ctx context.Context, evs []event.RouterEvent, meta ...Meta) (Result, error) {
	ctx, release, err := d.Admit(ctx, len(evs), false) // a source waits for its share (admission.go)
	if err != nil {
		return Result{}, err
	}
	defer release()
	return d.submitRenewing(ctx, evs, meta)
}
