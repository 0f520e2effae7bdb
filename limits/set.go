package limits

import (
	"fmt"
	"runtime"
	"strconv"
	"time"
)

// Set is one run's limits. In a request, zero in a field means "not given": Resolve takes the
// server default for it.
type Set struct {
	// Timeout is the wall-clock limit of the run.
	Timeout time.Duration
	// CPUTime is the CPU time limit. It becomes RLIMIT_CPU in whole seconds, rounded up; the
	// caller also compares it with the cgroup's CPU usage (Usage.CPUTime).
	CPUTime time.Duration
	// MemoryBytes is the cgroup memory limit. Swap is always 0.
	MemoryBytes int64
	// Pids is the cgroup pids limit (processes and threads).
	Pids int64
	// CPUs is the CPU quota in CPUs (0.5 is half a core) over a CFS period of 100ms.
	CPUs float64
	// OutputBytes caps each captured stream (stdout, stderr) separately.
	OutputBytes int64
	// TmpfsBytes is the size of EACH writable tmpfs (/tmp, /work, /dev/shm). Tmpfs pages are
	// charged to the memory cgroup, so Validate keeps it at most MemoryBytes/4.
	TmpfsBytes int64
	// FileBytes is RLIMIT_FSIZE, the largest file the run may write.
	FileBytes int64
	// OpenFiles is RLIMIT_NOFILE.
	OpenFiles uint64
}

// Sanity bounds checked by Validate.
const (
	// MinMemoryBytes is the smallest memory limit: the container's init and a shell need a few
	// MiB before the program starts.
	MinMemoryBytes = 8 << 20
	// MinCPUs is the smallest CPU quota: 1ms of CPU per 100ms period, the kernel's minimum quota.
	MinCPUs = 0.01
	// MaxCPUs bounds the quota so that it stays a sane number of microseconds.
	MaxCPUs = 4096
	// MaxOpenFiles is the kernel's default fs.nr_open; setrlimit above it fails.
	MaxOpenFiles = 1 << 20
	// CPUPeriod is the CFS period used for the CPU quota.
	CPUPeriod = 100 * time.Millisecond
)

// Defaults are the limits of a run that asks for nothing: 10s wall clock and CPU, 256 MiB memory,
// 64 pids, 1 CPU, 1 MiB per output stream, 64 MiB per tmpfs and per file, 256 open files.
func Defaults() Set {
	return Set{
		Timeout:     10 * time.Second,
		CPUTime:     10 * time.Second,
		MemoryBytes: 256 << 20,
		Pids:        64,
		CPUs:        1,
		OutputBytes: 1 << 20,
		TmpfsBytes:  64 << 20,
		FileBytes:   64 << 20,
		OpenFiles:   256,
	}
}

// Ceilings are the default server-wide upper bounds of what a run may ask for: 5 minutes wall
// clock and CPU, 4 GiB memory, 1024 pids, every host CPU, 64 MiB per output stream, 1 GiB per tmpfs
// and per file, 4096 open files.
func Ceilings() Set {
	return Set{
		Timeout:     5 * time.Minute,
		CPUTime:     5 * time.Minute,
		MemoryBytes: 4 << 30,
		Pids:        1024,
		CPUs:        float64(runtime.NumCPU()),
		OutputBytes: 64 << 20,
		TmpfsBytes:  1 << 30,
		FileBytes:   1 << 30,
		OpenFiles:   4096,
	}
}

// Field names used in errors and notes.
const (
	fieldTimeout   = "timeout"
	fieldCPUTime   = "cpu_time"
	fieldMemory    = "memory"
	fieldPids      = "pids"
	fieldCPUs      = "cpus"
	fieldOutput    = "output"
	fieldTmpfs     = "tmpfs"
	fieldFileSize  = "file_size"
	fieldOpenFiles = "open_files"
)

// Validate reports whether s can be applied as is: every field positive, memory at least
// MinMemoryBytes, CPUs between MinCPUs and MaxCPUs, open files at most MaxOpenFiles, and each tmpfs
// at most a quarter of the memory limit, so /tmp, /work and /dev/shm together stay below it. The
// error wraps ErrInvalid and names the first offending field and its value.
func (s Set) Validate() error {
	if err := s.positive(""); err != nil {
		return err
	}
	switch {
	case s.MemoryBytes < MinMemoryBytes:
		return invalidf("%s: %s is below the minimum %s", fieldMemory, FormatSize(s.MemoryBytes), FormatSize(MinMemoryBytes))
	case !(s.CPUs >= MinCPUs): // also catches NaN
		return invalidf("%s: %s is below the minimum %s", fieldCPUs, formatCPUs(s.CPUs), formatCPUs(MinCPUs))
	case !(s.CPUs <= MaxCPUs):
		return invalidf("%s: %s is above the maximum %s", fieldCPUs, formatCPUs(s.CPUs), formatCPUs(MaxCPUs))
	case s.OpenFiles > MaxOpenFiles:
		return invalidf("%s: %d is above the maximum %d", fieldOpenFiles, s.OpenFiles, MaxOpenFiles)
	case s.TmpfsBytes > s.MemoryBytes/4:
		return invalidf("%s: %s is above a quarter of memory %s (tmpfs pages are charged to the memory limit)",
			fieldTmpfs, FormatSize(s.TmpfsBytes), FormatSize(s.MemoryBytes))
	}
	return nil
}

// positive checks that every field of s is > 0. what ("", "ceiling") prefixes the message.
func (s Set) positive(what string) error {
	if what != "" {
		what += " "
	}
	check := func(field string, ok bool, value string) error {
		if ok {
			return nil
		}
		return invalidf("%s: %s%s must be positive", field, what, value)
	}
	for _, err := range []error{
		check(fieldTimeout, s.Timeout > 0, s.Timeout.String()),
		check(fieldCPUTime, s.CPUTime > 0, s.CPUTime.String()),
		check(fieldMemory, s.MemoryBytes > 0, FormatSize(s.MemoryBytes)),
		check(fieldPids, s.Pids > 0, strconv.FormatInt(s.Pids, 10)),
		check(fieldCPUs, s.CPUs > 0, formatCPUs(s.CPUs)),
		check(fieldOutput, s.OutputBytes > 0, FormatSize(s.OutputBytes)),
		check(fieldTmpfs, s.TmpfsBytes > 0, FormatSize(s.TmpfsBytes)),
		check(fieldFileSize, s.FileBytes > 0, FormatSize(s.FileBytes)),
		check(fieldOpenFiles, s.OpenFiles > 0, strconv.FormatUint(s.OpenFiles, 10)),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// Resolve applies a request's limits on top of the server defaults, clamped to the ceilings.
//
// A field of req that is zero takes the default; a positive field replaces it, tighter or looser.
// A value above its ceiling (requested or default) is clamped to the ceiling and the clamp is
// reported in notes, e.g. "memory: requested 8 GiB, ceiling 4 GiB". TmpfsBytes is then clamped to
// a quarter of MemoryBytes: noted too when the request set it, silently when it is the default
// (a default that follows another limit is not a clamp). The result is Validated.
//
// A negative or non-finite requested value, a result that fails Validate (e.g. 1 MiB of memory)
// or a ceiling that is not positive is an error wrapping ErrInvalid that names the field.
func Resolve(defaults, ceilings, req Set) (Set, []string, error) {
	if err := ceilings.positive("ceiling"); err != nil {
		return Set{}, nil, err
	}
	var (
		out   Set
		notes []string
		err   error
	)
	// One line per field; resolve stops at the first error.
	resolve(&err, &notes, &out.Timeout, fieldTimeout, defaults.Timeout, ceilings.Timeout, req.Timeout, time.Duration.String)
	resolve(&err, &notes, &out.CPUTime, fieldCPUTime, defaults.CPUTime, ceilings.CPUTime, req.CPUTime, time.Duration.String)
	resolve(&err, &notes, &out.MemoryBytes, fieldMemory, defaults.MemoryBytes, ceilings.MemoryBytes, req.MemoryBytes, FormatSize)
	resolve(&err, &notes, &out.Pids, fieldPids, defaults.Pids, ceilings.Pids, req.Pids, formatInt)
	resolve(&err, &notes, &out.CPUs, fieldCPUs, defaults.CPUs, ceilings.CPUs, req.CPUs, formatCPUs)
	resolve(&err, &notes, &out.OutputBytes, fieldOutput, defaults.OutputBytes, ceilings.OutputBytes, req.OutputBytes, FormatSize)
	resolve(&err, &notes, &out.TmpfsBytes, fieldTmpfs, defaults.TmpfsBytes, ceilings.TmpfsBytes, req.TmpfsBytes, FormatSize)
	resolve(&err, &notes, &out.FileBytes, fieldFileSize, defaults.FileBytes, ceilings.FileBytes, req.FileBytes, FormatSize)
	resolve(&err, &notes, &out.OpenFiles, fieldOpenFiles, defaults.OpenFiles, ceilings.OpenFiles, req.OpenFiles, formatUint)
	if err != nil {
		return Set{}, nil, err
	}
	// Tmpfs pages are charged to the memory cgroup: three tmpfs at a quarter each stay below it.
	// A tmpfs the request did not set follows the memory limit silently: only the size the
	// request asked for is clamped (and noted).
	if quarter := (out.MemoryBytes / 4) &^ (pageSize - 1); out.TmpfsBytes > quarter && quarter > 0 {
		if req.TmpfsBytes > 0 {
			notes = append(notes, fmt.Sprintf("%s: %s is above a quarter of memory %s, clamped to %s",
				fieldTmpfs, FormatSize(out.TmpfsBytes), FormatSize(out.MemoryBytes), FormatSize(quarter)))
		}
		out.TmpfsBytes = quarter
	}
	if err := out.Validate(); err != nil {
		return Set{}, nil, err
	}
	return out, notes, nil
}

// ValidateConfig checks a server's defaults and ceilings together: every ceiling positive, the
// defaults valid and within the ceilings, so that Resolve of an empty request returns the defaults
// unchanged and without notes.
func ValidateConfig(defaults, ceilings Set) error {
	if err := ceilings.positive("ceiling"); err != nil {
		return err
	}
	if err := defaults.Validate(); err != nil {
		return fmt.Errorf("defaults: %w", err)
	}
	_, notes, err := Resolve(defaults, ceilings, Set{})
	if err != nil {
		return err
	}
	if len(notes) > 0 {
		return invalidf("defaults above ceilings: %s", notes[0])
	}
	return nil
}

const pageSize = 4096

// resolve sets *dst to req (if positive) or def, clamped to ceil; a clamp appends a note.
// It does nothing once *errp is set, and sets it for a negative or non-finite req.
func resolve[T ~int64 | ~uint64 | ~float64](errp *error, notes *[]string, dst *T, field string, def, ceil, req T, show func(T) string) {
	if *errp != nil {
		return
	}
	// req-req is 0 for every finite value and NaN for NaN and ±Inf.
	if req < 0 || req-req != 0 {
		*errp = invalidf("%s: requested %s is negative or not a number", field, show(req))
		return
	}
	v, source := def, "default"
	if req > 0 {
		v, source = req, "requested"
	}
	if v > ceil {
		*notes = append(*notes, fmt.Sprintf("%s: %s %s, ceiling %s", field, source, show(v), show(ceil)))
		v = ceil
	}
	*dst = v
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

func formatInt(v int64) string    { return strconv.FormatInt(v, 10) }
func formatUint(v uint64) string  { return strconv.FormatUint(v, 10) }
func formatCPUs(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
