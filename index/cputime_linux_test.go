package index_test

import (
	"syscall"
	"time"
)

// cpuTime returns the user and system CPU time of the calling thread (RUSAGE_THREAD), or of the
// whole process, GC workers included.
func cpuTime(thread bool) time.Duration {
	who := syscall.RUSAGE_SELF
	if thread {
		who = 1 // RUSAGE_THREAD
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
