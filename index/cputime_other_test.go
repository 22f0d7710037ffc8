//go:build !linux

package index_test

import "time"

// cpuTime is measured on Linux only (cputime_linux_test.go).
func cpuTime(thread bool) time.Duration { return 0 }
