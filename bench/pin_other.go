//go:build !linux

package bench

import (
	"fmt"
	"log/slog"
)

// pinApart needs Linux's sched_setaffinity and /proc (pin_linux.go).
func pinApart(string, *slog.Logger) error {
	return fmt.Errorf("%w: --pin works on Linux only (use taskset or your system's tool)", ErrPin)
}
