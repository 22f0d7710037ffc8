package store

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"

	cerrors "github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
	pwal "github.com/cockroachdb/pebble/v2/wal"
)

// pebbleLogger forwards Pebble's log lines to slog under component=pebble.
type pebbleLogger struct {
	log   *slog.Logger
	fatal *atomic.Bool // the store's: set before Fatalf panics
}

// Infof logs at debug level: Pebble's info lines (WAL recovery, table stats, ...) are its own
// bookkeeping, not news to a kvindex operator.
func (l pebbleLogger) Infof(format string, args ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
	}
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf must not return (Pebble continues as if the failed operation succeeded otherwise): it
// logs and panics with an error wrapping ErrFatal.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if l.fatal != nil {
		l.fatal.Store(true)
	}
	l.log.Error(msg, "component", "pebble", "fatal", true)
	panic(fmt.Errorf("%w: %s", ErrFatal, msg))
}

func (s *Store) eventListener(ln Listener) *pebble.EventListener {
	log := s.log.With("component", "pebble")
	return &pebble.EventListener{
		BackgroundError: func(err error) {
			log.Error("background error", "err", err)
			if ln.BackgroundError != nil {
				ln.BackgroundError(err)
			}
		},
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			log.Error("data corruption", "path", info.Path, "err", info.Details)
			if ln.Corruption != nil {
				ln.Corruption(info.Path, info.Details)
			}
		},
		WALCreated: func(info pebble.WALCreateInfo) {
			log.Debug("wal created", "path", info.Path, "recycled", info.RecycledFileNum != 0)
		},
		WALDeleted: func(info pebble.WALDeleteInfo) {
			log.Debug("wal deleted", "path", info.Path, "err", info.Err)
		},
		FlushEnd: func(info pebble.FlushInfo) {
			log.Debug("flush", "info", info.String())
		},
		CompactionEnd: func(info pebble.CompactionInfo) {
			log.Debug("compaction", "info", info.String())
		},
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			log.Warn("write stall begin", "reason", info.Reason)
		},
		WriteStallEnd: func() { log.Info("write stall end") },
		DiskSlow: func(info pebble.DiskSlowInfo) {
			log.Warn("disk slow", "path", info.Path, "duration_ms", info.Duration.Milliseconds())
		},
		LowDiskSpace: func(info pebble.LowDiskSpaceInfo) {
			log.Warn("low disk space", "info", info.String())
		},
	}
}

// oneLineErr is err's message without the stack trace that cockroachdb/errors attach and a log
// handler would print with it.
func oneLineErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// scanWALTail reads the newest WAL the way Pebble's recovery does and reports a torn tail (an
// unfinished record at the end), which Pebble's Open drops with only an info line. Older WALs
// are not scanned: Pebble treats an unclean end there as corruption and fails Open itself.
func scanWALTail(fs vfs.FS, dir string) ([]TornTail, error) {
	logs, err := pwal.Scan(pwal.Dir{FS: fs, Dirname: dir})
	if err != nil || len(logs) == 0 {
		return nil, err
	}
	ll := logs[len(logs)-1]
	r := ll.OpenForRead()
	defer r.Close()
	var last pwal.Offset
	for {
		rec, off, err := r.NextRecord()
		if err == nil {
			_, err = io.Copy(io.Discard, rec)
		}
		if err != nil {
			if cerrors.Is(err, io.EOF) {
				return nil, nil
			}
			if cerrors.Is(err, record.ErrUnexpectedEOF) {
				if off.PhysicalFile == "" {
					off = last
				}
				return []TornTail{{WAL: off.PhysicalFile, Offset: off.Physical, Err: err}}, nil
			}
			// Invalid or zeroed chunks are corruption: Pebble's Open reports them.
			return nil, nil
		}
		last = off
	}
}
