package bench

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/workload"
	"github.com/schollz/progressbar/v3"
)

// chunkEvents is how many events a stage generates before it hands them to its producers: one
// chunk at --scale 8 (137,896 events), so small runs drive exactly what a materialized stream
// would; 100 MB or so of events and blocks at any scale.
const chunkEvents = 1 << 18

// progressEvery is how often a driven stage logs how far it is.
const progressEvery = 15 * time.Second

// submitFunc hands one batch of a producer's events to the system measured.
type submitFunc func(ctx context.Context, evs []event.RouterEvent) error

// eventSource yields a stream's events in order, a chunk at a time; ok is false at the end.
type eventSource func() (evs []event.RouterEvent, ok bool)

// streamEvents is the events of a stream from its start, chunkEvents at a time.
func streamEvents(s *workload.Stream) eventSource {
	rd := s.Reader()
	return func() ([]event.RouterEvent, bool) {
		ch, ok := rd.Next(chunkEvents, false)
		return ch.Events, ok
	}
}

// shifted is src with every worker id raised by by (the loaded stage's second copy of the
// stream: none of it is stale for the first). The events are copies; their block slices are
// shared, never written.
func shifted(src eventSource, by uint64) eventSource {
	return func() ([]event.RouterEvent, bool) {
		evs, ok := src()
		out := slices.Clone(evs)
		for i := range out {
			out[i].WorkerID += by
		}
		return out, ok
	}
}

// split assigns ranks to producers — the i-th rank to appear belongs to producer i % n, across
// every chunk of a stream — and queues each event on its producer, in stream order.
type split struct {
	owner  map[event.Rank]int
	queues [][]event.RouterEvent
}

func newSplit(n int) *split {
	return &split{owner: map[event.Rank]int{}, queues: make([][]event.RouterEvent, n)}
}

func (s *split) add(evs []event.RouterEvent) {
	for i := range evs {
		rk := evs[i].Rank()
		p, ok := s.owner[rk]
		if !ok {
			p = len(s.owner) % len(s.queues)
			s.owner[rk] = p
		}
		s.queues[p] = append(s.queues[p], evs[i])
	}
}

// driveOpts are the knobs of one driven stage.
type driveOpts struct {
	what   string
	submit submitFunc
	total  int // events the source yields, for the progress bar
	batch  int
	rate   float64 // events/s over all producers; 0: as fast as they go
	sent   *atomic.Int64
	// gen, when set, is held while a chunk is generated (the loaded stage's querier holds it
	// shared around each query, so no query is timed beside the generator).
	gen sync.Locker
}

// drive generates the source chunk by chunk and, after each, lets one goroutine per producer
// with queued events hand them to fn in order, batch at a time (paced to rate when set): a
// producer's batches are exactly those of its whole stream sliced by batch, whatever the chunk
// boundaries (a short tail waits for the next chunk). Generating a chunk is not timed: the
// returned duration is the sum of the producer phases, from their start until the last one
// finished. The first error stops the others and is returned.
func (r *run) drive(ctx context.Context, src eventSource, d driveOpts) (time.Duration, error) {
	bar := r.bar(d.what, d.total)
	sp := newSplit(r.o.Producers)
	var took time.Duration
	done, logged := 0, time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return took, err
		}
		if d.gen != nil {
			d.gen.Lock()
		}
		evs, ok := src()
		sp.add(evs)
		done += len(evs)
		if d.gen != nil {
			d.gen.Unlock()
		}
		start := time.Now()
		err := r.phase(ctx, sp.queues, !ok, d, bar)
		took += time.Since(start)
		if err != nil {
			return took, err
		}
		if !ok {
			break
		}
		if time.Since(logged) >= progressEvery {
			logged = time.Now()
			r.lg.Info("bench: progress", "stage", d.what, "events", done, "of", d.total, "driven_ms", took.Milliseconds())
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	return took, nil
}

// phase submits every full batch of each queue (every event when last) and leaves the rest
// queued.
func (r *run) phase(ctx context.Context, queues [][]event.RouterEvent, last bool, d driveOpts, bar *progressbar.ProgressBar) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	first := firstError{cancel: cancel}
	producers := 0
	for _, q := range queues {
		if len(q) > 0 {
			producers++
		}
	}
	perProducer := d.rate / float64(max(producers, 1))
	start := time.Now()
	for p := range queues {
		q := queues[p]
		if len(q) < d.batch && !(last && len(q) > 0) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for ; n+d.batch <= len(q) || (last && n < len(q)); n += d.batch {
				if perProducer > 0 {
					due := start.Add(time.Duration(float64(n) / perProducer * float64(time.Second)))
					if err := sleepUntil(ctx, due); err != nil {
						first.set(err)
						break
					}
				}
				evs := q[n:min(n+d.batch, len(q))]
				if err := d.submit(ctx, evs); err != nil {
					first.set(err)
					break
				}
				if d.sent != nil {
					d.sent.Add(int64(len(evs)))
				}
				if bar != nil {
					_ = bar.Add(len(evs))
				}
			}
			// The tail waits for the next chunk, in fresh memory (the chunk can go).
			queues[p] = append([]event.RouterEvent(nil), q[min(n, len(q)):]...)
		}()
	}
	wg.Wait()
	if first.err == nil {
		return ctx.Err() // the caller's ctx: cancel above only runs after an error
	}
	return first.err
}

// firstError keeps the first error of a group of goroutines, preferring a real one over the
// cancellation it caused, and cancels the group on the first.
type firstError struct {
	mu     sync.Mutex
	err    error
	cancel context.CancelFunc
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	f.err = cmpErr(f.err, err)
	f.mu.Unlock()
	f.cancel()
}

// cmpErr keeps the first error, preferring a real one over a cancellation it caused.
func cmpErr(first, err error) error {
	if first == nil || (errors.Is(first, context.Canceled) && !errors.Is(err, context.Canceled)) {
		return err
	}
	return first
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
