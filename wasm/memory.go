package wasm

import (
	"sync"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"
)

// allocator backs a run's linear memories and is where the run's memory
// limit holds: a memory never grows past limit bytes. The module declares
// its own maximum (or none: 4 GiB for wasm32); wazero asks the allocator
// for each growth, and a refused growth makes memory.grow return -1, which
// the module sees as malloc returning NULL. Unlike a limit set on the
// wazero runtime (WithMemoryLimitPages, where the refusal happens inside
// wazero), the allocator knows that the limit was reached, so the verdict
// can say memory_limit for certain.
//
// Each memory is one anonymous private mapping of the limit's size, made
// with MAP_NORESERVE: address space only, pages cost host memory when the
// module touches them, never more than limit bytes; the mapping never
// moves (no copy on growth), and it is unmapped when the run ends.
type allocator struct {
	limit uint64

	mu      sync.Mutex
	peak    uint64 // the largest size any memory reached
	refused bool   // a growth past the limit was asked for
}

func (a *allocator) Allocate(_, max uint64) experimental.LinearMemory {
	return &linearMemory{a: a, reserve: min(max, a.limit)}
}

// reached reports the peak and whether the limit refused a growth.
func (a *allocator) reached() (peak uint64, refused bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.peak, a.refused
}

// linearMemory is one memory of a run (see allocator).
type linearMemory struct {
	a       *allocator
	reserve uint64
	buf     []byte // the whole mapping; nil until the first Reallocate
}

// Reallocate grows the memory to size bytes, or returns nil (refused).
func (m *linearMemory) Reallocate(size uint64) []byte {
	m.a.mu.Lock()
	defer m.a.mu.Unlock()
	if size > m.reserve {
		if size > m.a.limit {
			m.a.refused = true
		}
		return nil
	}
	if m.buf == nil && m.reserve > 0 {
		b, err := unix.Mmap(-1, 0, int(m.reserve), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err != nil {
			return nil // the host has no address space left: a refused growth
		}
		m.buf = b
	}
	m.a.peak = max(m.a.peak, size)
	if m.buf == nil {
		return []byte{}
	}
	return m.buf[:size]
}

// Free unmaps the memory (wazero calls it when the module is closed).
func (m *linearMemory) Free() {
	m.a.mu.Lock()
	defer m.a.mu.Unlock()
	if m.buf != nil {
		_ = unix.Munmap(m.buf)
		m.buf = nil
	}
}
