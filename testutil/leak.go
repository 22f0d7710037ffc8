package testutil

import "go.uber.org/goleak"

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
