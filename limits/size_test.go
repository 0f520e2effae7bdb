package limits

import (
	"errors"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1048576", 1 << 20},
		{"512k", 512 << 10},
		{"512K", 512 << 10},
		{"512KB", 512 << 10},
		{"128MiB", 128 << 20},
		{"128m", 128 << 20},
		{"1GiB", 1 << 30},
		{"1 GiB", 1 << 30},
		{" 2g ", 2 << 30},
		{"1.5GiB", 3 << 29},
		{"0.5k", 512},
		{"1TiB", 1 << 40},
		{"100B", 100},
		{"9223372036854775807", 1<<63 - 1},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, nil", tt.in, got, err, tt.want)
		}
	}
}

func TestParseSizeErrors(t *testing.T) {
	for _, in := range []string{"", " ", "-1", "-1MiB", "MiB", "1XB", "1e6", "1..5k", ".", "1 2", "9223372036854775808", "8388608TiB", "1e300k", "0x10"} {
		if got, err := ParseSize(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseSize(%q) = %d, %v; want error wrapping ErrInvalid", in, got, err)
		}
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0 B"},
		{1000, "1000 B"},
		{1024, "1 KiB"},
		{1536 << 20, "1536 MiB"},
		{8 << 30, "8 GiB"},
		{3 << 40, "3 TiB"},
		{1<<20 + 1, "1048577 B"},
	}
	for _, tt := range tests {
		if got := FormatSize(tt.in); got != tt.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSizeRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 1023, 1024, 4096, 1<<20 + 1, 64 << 20, 1536 << 20, 8 << 30, 5 << 40, 1<<63 - 1} {
		s := FormatSize(n)
		got, err := ParseSize(s)
		if err != nil || got != n {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, %v; want %d, nil", n, s, got, err, n)
		}
	}
}
