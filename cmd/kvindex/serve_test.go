package main

import (
	"errors"
	"testing"
)

// TestParseSize checks the rule "--memtable-size and --cache-size take bytes with an optional
// unit (KiB/MiB/GiB powers of 1024, KB/MB/GB of 1000) and refuse values outside their bounds as
// usage errors".
func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"64MiB", 64 << 20, true},
		{"16 MiB", 16 << 20, true},
		{"64MB", 64_000_000, true},
		{"1GiB", 1 << 30, true},
		{"1048576", 1 << 20, true},
		{"1MiB", 1 << 20, true},
		{"1023KiB", 0, false}, // below 1 MiB
		{"4GiB", 0, false},    // Pebble refuses a memtable of 4 GiB
		{"", 0, false},
		{"lots", 0, false},
		{"-5MiB", 0, false},
	} {
		got, err := parseSizeValue("memtable-size", c.in, minStoreMemory, maxMemTableSize)
		if c.ok != (err == nil) || got != c.want {
			t.Errorf("parseSizeValue(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
		var ue usageError
		if err != nil && !errors.As(err, &ue) {
			t.Errorf("parseSizeValue(%q): error %v is not a usage error", c.in, err)
		}
	}
}
