package limits

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// testCeilings are fixed ceilings, independent of the host's CPU count.
func testCeilings() Set {
	c := Ceilings()
	c.CPUs = 4
	return c
}

func TestDefaultsAndCeilingsAreValid(t *testing.T) {
	if err := Defaults().Validate(); err != nil {
		t.Errorf("Defaults().Validate() = %v, want nil", err)
	}
	if err := Ceilings().Validate(); err != nil {
		t.Errorf("Ceilings().Validate() = %v, want nil", err)
	}
	if err := ValidateConfig(Defaults(), Ceilings()); err != nil {
		t.Errorf("ValidateConfig(Defaults(), Ceilings()) = %v, want nil", err)
	}
}

func TestResolve(t *testing.T) {
	d := Defaults()
	with := func(f func(*Set)) Set {
		s := d
		f(&s)
		return s
	}
	tests := []struct {
		name      string
		req       Set
		want      Set
		wantNotes []string
	}{
		{"empty request takes defaults", Set{}, d, nil},
		{"tighter timeout", Set{Timeout: time.Second}, with(func(s *Set) { s.Timeout = time.Second }), nil},
		{"tighter cpu time", Set{CPUTime: 1500 * time.Millisecond}, with(func(s *Set) { s.CPUTime = 1500 * time.Millisecond }), nil},
		{"tighter pids", Set{Pids: 8}, with(func(s *Set) { s.Pids = 8 }), nil},
		{"tighter cpus", Set{CPUs: 0.5}, with(func(s *Set) { s.CPUs = 0.5 }), nil},
		{"tighter output", Set{OutputBytes: 1024}, with(func(s *Set) { s.OutputBytes = 1024 }), nil},
		{"tighter tmpfs", Set{TmpfsBytes: 1 << 20}, with(func(s *Set) { s.TmpfsBytes = 1 << 20 }), nil},
		{"tighter file size", Set{FileBytes: 1 << 10}, with(func(s *Set) { s.FileBytes = 1 << 10 }), nil},
		{"tighter open files", Set{OpenFiles: 16}, with(func(s *Set) { s.OpenFiles = 16 }), nil},
		{"looser within ceiling", Set{Timeout: time.Minute, MemoryBytes: 1 << 30, Pids: 512},
			with(func(s *Set) { s.Timeout, s.MemoryBytes, s.Pids = time.Minute, 1<<30, 512 }), nil},
		{"timeout over ceiling", Set{Timeout: time.Hour}, with(func(s *Set) { s.Timeout = 5 * time.Minute }),
			[]string{"timeout: requested 1h0m0s, ceiling 5m0s"}},
		{"cpu time over ceiling", Set{CPUTime: time.Hour}, with(func(s *Set) { s.CPUTime = 5 * time.Minute }),
			[]string{"cpu_time: requested 1h0m0s, ceiling 5m0s"}},
		{"memory over ceiling", Set{MemoryBytes: 8 << 30}, with(func(s *Set) { s.MemoryBytes = 4 << 30 }),
			[]string{"memory: requested 8 GiB, ceiling 4 GiB"}},
		{"pids over ceiling", Set{Pids: 5000}, with(func(s *Set) { s.Pids = 1024 }),
			[]string{"pids: requested 5000, ceiling 1024"}},
		{"cpus over ceiling", Set{CPUs: 8}, with(func(s *Set) { s.CPUs = 4 }),
			[]string{"cpus: requested 8, ceiling 4"}},
		{"output over ceiling", Set{OutputBytes: 1 << 30}, with(func(s *Set) { s.OutputBytes = 64 << 20 }),
			[]string{"output: requested 1 GiB, ceiling 64 MiB"}},
		{"file size over ceiling", Set{FileBytes: 2 << 30}, with(func(s *Set) { s.FileBytes = 1 << 30 }),
			[]string{"file_size: requested 2 GiB, ceiling 1 GiB"}},
		{"open files over ceiling", Set{OpenFiles: 1 << 20}, with(func(s *Set) { s.OpenFiles = 4096 }),
			[]string{"open_files: requested 1048576, ceiling 4096"}},
		{"tmpfs over ceiling then quarter of memory", Set{TmpfsBytes: 2 << 30, MemoryBytes: 4 << 30},
			with(func(s *Set) { s.TmpfsBytes, s.MemoryBytes = 1<<30, 4<<30 }),
			[]string{"tmpfs: requested 2 GiB, ceiling 1 GiB"}},
		// A tmpfs the request did not set follows the memory limit: no clamp, no note.
		{"default tmpfs follows small memory silently", Set{MemoryBytes: 32 << 20},
			with(func(s *Set) { s.MemoryBytes, s.TmpfsBytes = 32<<20, 8<<20 }), nil},
		{"default tmpfs follows 128 MiB memory silently", Set{MemoryBytes: 128 << 20},
			with(func(s *Set) { s.MemoryBytes, s.TmpfsBytes = 128<<20, 32<<20 }), nil},
		{"requested tmpfs clamped to quarter of small memory", Set{MemoryBytes: 32 << 20, TmpfsBytes: 64 << 20},
			with(func(s *Set) { s.MemoryBytes, s.TmpfsBytes = 32<<20, 8<<20 }),
			[]string{"tmpfs: 64 MiB is above a quarter of memory 32 MiB, clamped to 8 MiB"}},
		{"requested tmpfs clamped to quarter of memory", Set{TmpfsBytes: 200 << 20},
			with(func(s *Set) { s.TmpfsBytes = 64 << 20 }),
			[]string{"tmpfs: 200 MiB is above a quarter of memory 256 MiB, clamped to 64 MiB"}},
		{"several clamps in field order", Set{Pids: 1 << 20, Timeout: time.Hour},
			with(func(s *Set) { s.Pids, s.Timeout = 1024, 5*time.Minute }),
			[]string{"timeout: requested 1h0m0s, ceiling 5m0s", "pids: requested 1048576, ceiling 1024"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, notes, err := Resolve(d, testCeilings(), tt.req)
			if err != nil {
				t.Fatalf("Resolve(%+v) error = %v", tt.req, err)
			}
			if got != tt.want {
				t.Errorf("Resolve(%+v) = %+v, want %+v", tt.req, got, tt.want)
			}
			if !reflect.DeepEqual(notes, tt.wantNotes) {
				t.Errorf("Resolve(%+v) notes = %q, want %q", tt.req, notes, tt.wantNotes)
			}
		})
	}
}

func TestResolveDefaultAboveCeiling(t *testing.T) {
	c := testCeilings()
	c.Pids = 10
	got, notes, err := Resolve(Defaults(), c, Set{})
	if err != nil {
		t.Fatalf("Resolve error = %v", err)
	}
	if got.Pids != 10 {
		t.Errorf("Resolve Pids = %d, want 10", got.Pids)
	}
	want := []string{"pids: default 64, ceiling 10"}
	if !reflect.DeepEqual(notes, want) {
		t.Errorf("Resolve notes = %q, want %q", notes, want)
	}
	if err := ValidateConfig(Defaults(), c); !errors.Is(err, ErrInvalid) {
		t.Errorf("ValidateConfig with default above ceiling = %v, want ErrInvalid", err)
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		name      string
		req       Set
		ceilings  func(*Set)
		wantField string
	}{
		{"negative timeout", Set{Timeout: -time.Second}, nil, "timeout"},
		{"negative cpu time", Set{CPUTime: -1}, nil, "cpu_time"},
		{"negative memory", Set{MemoryBytes: -1}, nil, "memory"},
		{"negative pids", Set{Pids: -5}, nil, "pids"},
		{"negative cpus", Set{CPUs: -0.5}, nil, "cpus"},
		{"NaN cpus", Set{CPUs: math.NaN()}, nil, "cpus"},
		{"infinite cpus", Set{CPUs: math.Inf(1)}, nil, "cpus"},
		{"negative output", Set{OutputBytes: -1}, nil, "output"},
		{"negative tmpfs", Set{TmpfsBytes: -1}, nil, "tmpfs"},
		{"negative file size", Set{FileBytes: -1}, nil, "file_size"},
		{"memory below minimum", Set{MemoryBytes: 1 << 20}, nil, "memory"},
		{"cpus below minimum", Set{CPUs: 0.001}, nil, "cpus"},
		{"zero memory ceiling", Set{}, func(c *Set) { c.MemoryBytes = 0 }, "memory: ceiling"},
		{"zero open files ceiling", Set{}, func(c *Set) { c.OpenFiles = 0 }, "open_files: ceiling"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testCeilings()
			if tt.ceilings != nil {
				tt.ceilings(&c)
			}
			got, notes, err := Resolve(Defaults(), c, tt.req)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Resolve(%+v) = %+v, %q, %v; want error wrapping ErrInvalid", tt.req, got, notes, err)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Errorf("Resolve(%+v) error = %q, want it to name %q", tt.req, err, tt.wantField)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	d := Defaults()
	tests := []struct {
		name      string
		mod       func(*Set)
		wantField string // "" means valid
	}{
		{"defaults", func(*Set) {}, ""},
		{"minimum memory", func(s *Set) { s.MemoryBytes, s.TmpfsBytes = MinMemoryBytes, MinMemoryBytes/4 }, ""},
		{"minimum cpus", func(s *Set) { s.CPUs = MinCPUs }, ""},
		{"tmpfs exactly a quarter", func(s *Set) { s.TmpfsBytes = s.MemoryBytes / 4 }, ""},
		{"zero timeout", func(s *Set) { s.Timeout = 0 }, "timeout"},
		{"zero cpu time", func(s *Set) { s.CPUTime = 0 }, "cpu_time"},
		{"zero memory", func(s *Set) { s.MemoryBytes = 0 }, "memory"},
		{"zero pids", func(s *Set) { s.Pids = 0 }, "pids"},
		{"zero cpus", func(s *Set) { s.CPUs = 0 }, "cpus"},
		{"zero output", func(s *Set) { s.OutputBytes = 0 }, "output"},
		{"zero tmpfs", func(s *Set) { s.TmpfsBytes = 0 }, "tmpfs"},
		{"zero file size", func(s *Set) { s.FileBytes = 0 }, "file_size"},
		{"zero open files", func(s *Set) { s.OpenFiles = 0 }, "open_files"},
		{"memory below minimum", func(s *Set) { s.MemoryBytes, s.TmpfsBytes = 4<<20, 1<<20 }, "memory"},
		{"cpus below minimum", func(s *Set) { s.CPUs = 0.005 }, "cpus"},
		{"cpus NaN", func(s *Set) { s.CPUs = math.NaN() }, "cpus"},
		{"cpus above maximum", func(s *Set) { s.CPUs = MaxCPUs + 1 }, "cpus"},
		{"open files above maximum", func(s *Set) { s.OpenFiles = MaxOpenFiles + 1 }, "open_files"},
		{"tmpfs above a quarter", func(s *Set) { s.TmpfsBytes = s.MemoryBytes/4 + 1 }, "tmpfs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := d
			tt.mod(&s)
			err := s.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Errorf("%+v.Validate() = %v, want nil", s, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantField) {
				t.Errorf("%+v.Validate() = %v, want error wrapping ErrInvalid naming %q", s, err, tt.wantField)
			}
		})
	}
}
