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
