package testutil

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/goleak"
)

// FailingWAL wraps fs so that, once *on is set, every operation of the given kinds on a Pebble
// WAL file (*.log) fails with errorfs.ErrInjected: the write/sync failures of the crash tests.
func FailingWAL(fs vfs.FS, kinds ...errorfs.OpKind) (vfs.FS, *atomic.Bool) {
	on := new(atomic.Bool)
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if on.Load() && strings.HasSuffix(op.Path, ".log") && slices.Contains(kinds, op.Kind) {
			return errorfs.ErrInjected
		}
		return nil
	})), on
}

// PebbleFatalLeftovers are the goroutines a Pebble DB leaves behind when it could not be closed
// after a fatal error (store.Store.Close gives up after store.FatalCloseWait): tests that inject
// fatal write failures pass these to goleak.
func PebbleFatalLeftovers() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/cockroachdb/pebble/v2/record.(*LogWriter).flushLoop"),
		goleak.IgnoreAnyFunction("github.com/cockroachdb/pebble/v2.(*cleanupManager).mainLoop"),
		goleak.IgnoreAnyFunction("github.com/cockroachdb/pebble/v2/internal/genericcache.(*shard[...]).releaseLoop"),
		goleak.IgnoreAnyFunction("github.com/cockroachdb/pebble/v2.(*DB).Close"),
	}
}

// SyncGate holds the syncs of a Pebble WAL (*.log) while it is closed: a store write blocked in
// its fsync, for the tests that check what does not wait for one (BlockingWAL).
type SyncGate struct {
	closed  atomic.Bool
	held    chan struct{} // receives once per sync held
	release chan struct{} // closed by Open
}

// BlockingWAL wraps fs so that, while the gate is closed (Close), every WAL sync waits until
// Open; Held receives once for each sync that waits.
func BlockingWAL(fs vfs.FS) (vfs.FS, *SyncGate) {
	g := &SyncGate{held: make(chan struct{}, 64), release: make(chan struct{})}
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if g.closed.Load() && strings.HasSuffix(op.Path, ".log") &&
			slices.Contains([]errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}, op.Kind) {
			select {
			case g.held <- struct{}{}:
			default:
			}
			<-g.release
		}
		return nil
	})), g
}

// Close makes the WAL's syncs wait from now on (call it once).
func (g *SyncGate) Close() { g.closed.Store(true) }

// Held receives when a sync waits at the closed gate.
func (g *SyncGate) Held() <-chan struct{} { return g.held }

// Open lets every waiting and later sync through (call it once, after Close).
func (g *SyncGate) Open() {
	g.closed.Store(false)
	close(g.release)
}
