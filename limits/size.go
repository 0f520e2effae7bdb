package limits

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits maps a lower-case unit to its multiplier. Every unit is binary: "k", "KB" and "KiB"
// all mean 1024, as in docker's --memory.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

// ParseSize parses a byte size: a non-negative number, optionally with a fraction, followed by an
// optional unit (B, k/K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB, case-insensitive, all binary),
// optionally separated by a space: "1048576", "512k", "128MiB", "1.5 GiB". A fraction is rounded
// down to whole bytes. Errors wrap ErrInvalid.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	mult, ok := sizeUnits[strings.ToLower(unit)]
	if num == "" || !ok {
		return 0, fmt.Errorf("%w: size %q: want a number with an optional unit such as 512k, 128MiB or 1GiB", ErrInvalid, s)
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n > math.MaxInt64/mult {
			return 0, fmt.Errorf("%w: size %q is out of range", ErrInvalid, s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: size %q: bad number", ErrInvalid, s)
	}
	v := math.Floor(f * float64(mult))
	if v >= math.MaxInt64 { // float64(MaxInt64) is 2^63, itself out of range
		return 0, fmt.Errorf("%w: size %q is out of range", ErrInvalid, s)
	}
	return int64(v), nil
}

// FormatSize formats n with the largest binary unit that divides it exactly ("8 GiB", "1536 MiB",
// "1000 B"), so ParseSize(FormatSize(n)) == n for every n >= 0.
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + " " + u.name
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}
