package wasm

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/tetratelabs/wazero/api"
)

// ruby.wasm as npm's @ruby/3.4-wasm-wasi ships it is a reactor, not a WASI
// command: it has no _start, and its JavaScript package drives it through
// exports of an early wit-bindgen ABI (names carry their WIT signature,
// "ruby-init: func(args: list<string>) -> ()"). rubyReactor drives it the
// way that package's RubyVM does (vm.initialize, then vm.eval): _initialize,
// ruby-init with the interpreter's options, ruby-init-loadpath, then one
// rb-eval-string-protect of a prelude that runs the script as `ruby
// SCRIPT ARGS...` would (ARGV, $0, the uncaught exception's report and
// exit status 1, exit's status, at_exit handlers in reverse order) and
// ends with exit!, a WASI proc_exit: the status is the run's exit code.
//
// The module also imports its JavaScript host's functions
// (rb-js-abi-host, for require "js"); outside a JavaScript host they are
// stubs that trap (see stubImports).

// rubyExports are the exports that make a module a ruby.wasm reactor.
var rubyExports = []string{"_initialize", "cabi_realloc", "ruby-init", "ruby-init-loadpath", "rb-eval-string-protect"}

// rubyArgs are the interpreter's options: gems off (the reactor has no
// gem directory; the standard library is in its embedded file system),
// UTF-8 source and I/O, and an empty -e so that ruby-init reads no script
// of its own.
var rubyArgs = []string{"ruby", "--disable-gems", "-EUTF-8", "-e_=0"}

// witExport finds an export by its WIT name, with or without the signature
// the old bindings append.
func witExport(m api.Module, name string) api.Function {
	if f := m.ExportedFunction(name); f != nil {
		return f
	}
	for n := range m.ExportedFunctionDefinitions() {
		if strings.HasPrefix(n, name+":") {
			return m.ExportedFunction(n)
		}
	}
	return nil
}

// isRubyReactor reports whether exports (names as the module has them)
// are ruby.wasm's.
func isRubyReactor(exports map[string]api.FunctionDefinition) bool {
	for _, want := range rubyExports {
		found := false
		for n := range exports {
			if n == want || strings.HasPrefix(n, want+":") {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// rubyPrelude is the script runner; %s are the script's path and ARGV as
// Ruby expressions.
const rubyPrelude = `$__sandcell_at_exit = []
module Kernel
  private def at_exit(&block)
    $__sandcell_at_exit.push(block)
    block
  end
end
__sandcell_status = 0
__sandcell_report = lambda do |e|
  if e.is_a?(SystemExit)
    __sandcell_status = e.status
  else
    STDERR.print(e.full_message(highlight: false))
    __sandcell_status = 1
  end
end
begin
  $0 = %s
  ARGV.replace(%s)
  load($0)
rescue Exception => e
  __sandcell_report.call(e)
end
while (b = $__sandcell_at_exit.pop)
  begin
    b.call
  rescue Exception => e
    __sandcell_report.call(e)
  end
end
STDOUT.flush rescue nil
STDERR.flush rescue nil
exit!(__sandcell_status)
`

// rubyString is s as a Ruby expression that cannot break out of its
// literal: its bytes in hex, packed back.
func rubyString(s string) string {
	return fmt.Sprintf(`["%s"].pack("H*").force_encoding(Encoding::UTF_8)`, hex.EncodeToString([]byte(s)))
}

// runRuby runs script with args in an instantiated ruby.wasm reactor. The
// run ends with the prelude's exit! (a *sys.ExitError from the call) or a
// trap; anything else is a driver failure.
func runRuby(ctx context.Context, m api.Module, script string, args []string) error {
	realloc := witExport(m, "cabi_realloc")
	mem := m.Memory()
	if mem == nil {
		return errors.New("ruby.wasm exports no memory")
	}
	// alloc copies b into the module's memory (cabi_realloc(0, 0, align,
	// size), the canonical ABI's allocation).
	alloc := func(b []byte, align uint64) (uint32, error) {
		r, err := realloc.Call(ctx, 0, 0, align, uint64(len(b)))
		if err != nil {
			return 0, err
		}
		p := uint32(r[0])
		if !mem.Write(p, b) {
			return 0, errors.New("cabi_realloc returned memory out of range")
		}
		return p, nil
	}
	if _, err := witExport(m, "_initialize").Call(ctx); err != nil {
		return err
	}
	// list<string>: (pointer, length) pairs of NUL-terminated strings.
	list := make([]byte, 8*len(rubyArgs))
	for i, a := range rubyArgs {
		p, err := alloc([]byte(a+"\x00"), 1)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint32(list[8*i:], p)
		binary.LittleEndian.PutUint32(list[8*i+4:], uint32(len(a)+1))
	}
	lp, err := alloc(list, 4)
	if err != nil {
		return err
	}
	if _, err := witExport(m, "ruby-init").Call(ctx, uint64(lp), uint64(len(rubyArgs))); err != nil {
		return err
	}
	if _, err := witExport(m, "ruby-init-loadpath").Call(ctx); err != nil {
		return err
	}
	argv := make([]string, len(args))
	for i, a := range args {
		argv[i] = rubyString(a)
	}
	code := fmt.Sprintf(rubyPrelude, rubyString(script), "["+strings.Join(argv, ", ")+"]")
	p, err := alloc([]byte(code), 1)
	if err != nil {
		return err
	}
	if _, err := witExport(m, "rb-eval-string-protect").Call(ctx, uint64(p), uint64(len(code))); err != nil {
		return err
	}
	return errors.New("ruby.wasm returned from the script without exiting")
}
