package offline

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/kvindex/kvindex/event"
	"github.com/kvindex/kvindex/recovery"
	"github.com/kvindex/kvindex/store"
	"github.com/kvindex/kvindex/testutil"
	"github.com/kvindex/kvindex/wal"
)

// Byte sizes, Pebble's file layout, wall-clock times and pids vary from run to run: the
// transcripts show them masked as N, TIME and PID.
var (
	maskBytes = regexp.MustCompile(`\d+ bytes|(total|log|snapshots|metadata|WAL|L\d) \d+|\d+ (sstables|WAL files)|read amplification \d+|"(total|log|snapshots|metadata|wal|tables|table_bytes|bytes|read_amp|wal_files|memtable_bytes|level)": \d+`)
	maskTime  = regexp.MustCompile(`\d{4}-\d\d-\d\dT[0-9:.]+Z`)
	maskPID   = regexp.MustCompile(`pid \d+\??`)
	digits    = regexp.MustCompile(`\d+`)
)

func mask(s string) string {
	s = maskBytes.ReplaceAllStringFunc(s, func(m string) string { return digits.ReplaceAllString(m, "N") })
	s = maskPID.ReplaceAllString(s, "pid PID")
	return maskTime.ReplaceAllString(s, "TIME")
}

// TestTranscripts runs the golden transcripts in testdata/: each builds a small data dir through
// the real write path (lanes → wal → store on an in-memory FS), then runs the offline commands
// on it. Commands:
//
//	ingest                  input: one event per line (RANK ID stored|removed|cleared ...),
//	                        submitted through a one-lane pipeline as a server would
//	fold rank=W/D up-to=N   online retention: lanes.Fold of the rank's log prefix
//	lock | unlock           hold the dir as a running server would
//	corrupt-record rank=W/D id=N    flip a byte of a log record's value through Pebble
//	corrupt-snapshot rank=W/D       flip a byte of the rank's snapshot value
//	stray-key               write a key outside the store's layout
//	kvindex compact|export|inspect|verify [flags]   the offline command, its output and error
//	                        (export also prints its per-rank notes, as the CLI does on stderr)
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		fs := vfs.NewMem()
		var held *store.Store
		defer func() {
			if held != nil {
				_ = held.Close()
			}
		}()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "ingest":
				s := openRW(t, fs)
				defer s.close(t)
				var evs []event.RouterEvent
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					ev, err := testutil.ParseEvent(line)
					if err != nil {
						d.Fatalf(t, "%v", err)
					}
					evs = append(evs, ev)
				}
				res, err := s.pipe.Submit(bg, evs)
				if err != nil {
					return "error: " + err.Error()
				}
				return fmt.Sprintf("accepted %d, ignored %d", res.Accepted, res.Ignored)
			case "fold":
				var rs string
				var upTo uint64
				d.ScanArgs(t, "rank", &rs)
				d.ScanArgs(t, "up-to", &upTo)
				r, err := testutil.ParseRank(rs)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				s := openRW(t, fs)
				defer s.close(t)
				if err := recovery.Fold(bg, s.log, r, upTo); err != nil {
					return "error: " + err.Error()
				}
				return "ok"
			case "lock":
				st, err := store.Open(testDir, store.Options{FS: fs, Logger: quiet()})
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				held = st
				return "ok"
			case "unlock":
				if err := held.Close(); err != nil {
					d.Fatalf(t, "%v", err)
				}
				held = nil
				return "ok"
			case "corrupt-record", "corrupt-snapshot", "stray-key":
				var key []byte
				if d.Cmd != "stray-key" {
					var rs string
					d.ScanArgs(t, "rank", &rs)
					r, err := testutil.ParseRank(rs)
					if err != nil {
						d.Fatalf(t, "%v", err)
					}
					key = store.RankKey(store.PrefixSnapshot, r)
					if d.Cmd == "corrupt-record" {
						var id uint64
						d.ScanArgs(t, "id", &id)
						key = store.LogKey(r, id)
					}
				}
				return corrupt(t, fs, key)
			case "kvindex":
				return mask(runCommand(t, fs, d))
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

// corrupt flips the last byte before the checksum of key's value (nil key: writes a stray key).
func corrupt(t *testing.T, fs vfs.FS, key []byte) string {
	st, err := store.Open(testDir, store.Options{FS: fs, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	db := st.DB()
	if key == nil {
		if err := db.Set([]byte("zzz"), []byte("?"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		return "ok"
	}
	v, closer, err := db.Get(key)
	if err != nil {
		return "error: " + err.Error()
	}
	bad := bytes.Clone(v)
	_ = closer.Close()
	bad[len(bad)-5] ^= 0x40
	if err := db.Set(key, bad, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("flipped a bit of byte %d of %d", len(bad)-5, len(bad))
}

// runCommand runs one offline command like the CLI would, from the transcript's flags.
func runCommand(t *testing.T, fs vfs.FS, d *datadriven.TestData) string {
	if len(d.CmdArgs) == 0 {
		d.Fatalf(t, "kvindex: which command?")
	}
	o := testOptions(fs)
	var out bytes.Buffer
	var notes []string
	var err error
	arg := func(k string) (uint64, bool) {
		if !d.HasArg(k) {
			return 0, false
		}
		var v uint64
		d.ScanArgs(t, k, &v)
		return v, true
	}
	switch d.CmdArgs[0].Key {
	case "compact":
		_, err = Compact(bg, &out, CompactOptions{Options: o})
	case "export":
		eo := ExportOptions{Options: o}
		if d.HasArg("what") {
			var w string
			d.ScanArgs(t, "what", &w)
			if eo.What, err = ParseWhat(w); err != nil {
				return "error: " + err.Error()
			}
		}
		w, hasW := arg("worker-id")
		dp, hasDP := arg("dp-rank")
		eo.Filter = Filter{Worker: w, HasWorker: hasW, DP: uint32(dp), HasDP: hasDP}
		eo.From, _ = arg("from")
		var res ExportResult
		res, err = Export(bg, &out, eo)
		for _, r := range res.Ranks {
			notes = append(notes, "stderr: "+r.Note())
		}
	case "inspect":
		_, err = Inspect(bg, &out, InspectOptions{Options: o, JSON: d.HasArg("json")})
	case "verify":
		_, err = Verify(bg, &out, VerifyOptions{Options: o})
	default:
		d.Fatalf(t, "unknown offline command %q", d.CmdArgs[0].Key)
	}
	s := out.String()
	for _, n := range notes {
		s += n + "\n"
	}
	if err != nil {
		s += "error: " + err.Error() + "\n"
		switch {
		case errors.Is(err, store.ErrLocked):
			s += "(store.ErrLocked)\n"
		case errors.Is(err, ErrProblems):
			s += "(ErrProblems)\n"
		case errors.Is(err, wal.ErrCorruption):
			s += "(wal.ErrCorruption)\n"
		}
	}
	return s
}
