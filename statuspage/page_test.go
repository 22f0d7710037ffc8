package statuspage

import (
	"errors"
	"testing"
)

// TestParseRefresh checks the rules of ?refresh=: absent is DefaultRefresh, a whole number of
// seconds is taken (0 turns the reload off), capped at an hour; anything else is ErrBadRefresh.
func TestParseRefresh(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  error
	}{
		{"", DefaultRefresh, nil}, {"0", 0, nil}, {"30", 30, nil}, {"99999", maxRefresh, nil},
		{"-1", 0, ErrBadRefresh}, {"1.5", 0, ErrBadRefresh}, {"soon", 0, ErrBadRefresh},
	} {
		got, err := ParseRefresh(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("ParseRefresh(%q) = %d, %v; want %d, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestHumanBytes checks the page's sizes: bytes below 1 KiB, else binary units with one decimal.
func TestHumanBytes(t *testing.T) {
	for in, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 3 << 30: "3.0 GiB"} {
		if got := humanBytes(in); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", in, got, want)
		}
	}
}
