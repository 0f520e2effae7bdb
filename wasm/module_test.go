package wasm

import "bytes"

// A tiny WebAssembly encoder for the tests: modules made of a few
// instructions, so that the runtime's limits can be tested without a
// compiler (the corpus in testdata/hostile/wasm tests them with clang's).

const (
	i32 = 0x7f

	opUnreachable = 0x00
	opLoop        = 0x03
	opBr          = 0x0c
	opBrIf        = 0x0d
	opEnd         = 0x0b
	opCall        = 0x10
	opDrop        = 0x1a
	opI32Const    = 0x41
	opI32Ne       = 0x47
	opMemoryGrow  = 0x40
	blockVoid     = 0x40
)

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func name(s string) []byte { return append(uleb(uint64(len(s))), s...) }

func vec(items ...[]byte) []byte {
	out := uleb(uint64(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

func section(id byte, content []byte) []byte {
	return append(append([]byte{id}, uleb(uint64(len(content)))...), content...)
}

func i32c(v int64) []byte { return append([]byte{opI32Const}, sleb(v)...) }

// The imports every test module has: fd_write is function 0, proc_exit 1;
// the module's _start is function 2.
const (
	fnFdWrite  = 0
	fnProcExit = 1
)

// testModule is a WASI command with one page of memory (max: maxPages,
// 0 for none), data at offset 0, and _start's body.
func testModule(data []byte, maxPages int, body ...[]byte) []byte {
	types := vec(
		append([]byte{0x60}, append(vec([]byte{i32}, []byte{i32}, []byte{i32}, []byte{i32}), vec([]byte{i32})...)...), // fd_write
		append([]byte{0x60}, append(vec([]byte{i32}), vec()...)...),                                                   // proc_exit
		append([]byte{0x60}, append(vec(), vec()...)...),                                                              // _start
	)
	imports := vec(
		append(append(name("wasi_snapshot_preview1"), name("fd_write")...), 0x00, 0),
		append(append(name("wasi_snapshot_preview1"), name("proc_exit")...), 0x00, 1),
	)
	mem := []byte{0x00, 1}
	if maxPages > 0 {
		mem = append([]byte{0x01, 1}, uleb(uint64(maxPages))...)
	}
	exports := vec(
		append(name("_start"), 0x00, 2),
		append(name("memory"), 0x02, 0),
	)
	code := bytes.Join(body, nil)
	fn := append(vec(), append(code, opEnd)...) // no locals
	codes := vec(append(uleb(uint64(len(fn))), fn...))
	var out []byte
	out = append(out, "\x00asm\x01\x00\x00\x00"...)
	out = append(out, section(1, types)...)
	out = append(out, section(2, imports)...)
	out = append(out, section(3, vec(uleb(2)))...)
	out = append(out, section(5, vec(mem))...)
	out = append(out, section(7, exports)...)
	out = append(out, section(10, codes)...)
	if len(data) > 0 {
		seg := append(append([]byte{0x00}, append(i32c(0), opEnd)...), append(uleb(uint64(len(data))), data...)...)
		out = append(out, section(11, vec(seg))...)
	}
	return out
}

// writeData is memory holding one iovec at 0 (pointing at text, at 16).
func writeData(text string) []byte {
	d := make([]byte, 16)
	d[0] = 16
	d[4] = byte(len(text))
	return append(d, text...)
}

// Bodies.
var (
	// fd_write(fd, iov 0, 1, nwritten at 8), result dropped.
	writeTo = func(fd int64) []byte {
		return bytes.Join([][]byte{i32c(fd), i32c(0), i32c(1), i32c(8), {opCall, fnFdWrite, opDrop}}, nil)
	}
	exitWith = func(code int64) []byte { return append(i32c(code), opCall, fnProcExit) }
	// loop { body; br 0 }
	forever = func(body ...[]byte) []byte {
		return bytes.Join([][]byte{{opLoop, blockVoid}, bytes.Join(body, nil), {opBr, 0, opEnd}}, nil)
	}
	// grow by 16 pages until refused, then exit 1
	growUntilRefused = bytes.Join([][]byte{{opLoop, blockVoid}, i32c(16), {opMemoryGrow, 0x00}, i32c(-1), {opI32Ne, opBrIf, 0, opEnd}, exitWith(1)}, nil)
	trap             = []byte{opUnreachable}
)
