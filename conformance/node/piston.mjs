// The npm package piston-client, unmodified, against sandcell's Piston v2
// API: driven by piston_test.go (go test), never run by hand in CI.
//
// usage: node piston.mjs URL
// Prints one JSON object {runtimes, python, javascript, c, cpp, bash,
// compileError, timeout, stdinArgs, phaseLimits, unknown} (each an answer of the client
// as it returned it) and exits 0; exits 1 with the error on stderr.

import piston from 'piston-client';

const client = piston({ server: process.argv[2] });
const out = {};
out.runtimes = await client.runtimes();
out.python = await client.execute('python', 'import sys\nprint("hello from python", sys.argv[1:])');
out.javascript = await client.execute('javascript', 'console.log("hello from node", process.argv.slice(2).join(" "))');
out.c = await client.execute('c', '#include <stdio.h>\nint main(int argc, char **argv) { printf("hello from c %d\\n", argc); return 0; }');
out.cpp = await client.execute('c++', '#include <iostream>\nint main() { std::cout << "hello from c++" << std::endl; }');
out.bash = await client.execute('bash', 'echo "hello from bash $#"; echo to stderr >&2; exit 3');
out.compileError = await client.execute('c', 'int main(void) { return 0 }');
out.timeout = await client.execute('python', 'while True:\n    pass', { runTimeout: 1000 });
out.stdinArgs = await client.execute({
  language: 'python',
  version: '3.x',
  files: [{ name: 'echo.py', content: 'import sys\nprint(sys.argv[0], sys.argv[1:], sys.stdin.read().split())' }],
  stdin: 'one two',
  args: ['x', 'y'],
});
// Each stage has its own limits: 16 MiB binds the run, not g++ (which
// needs several times that for <iostream>).
out.phaseLimits = await client.execute('c++', '#include <iostream>\nint main() { std::cout << "small" << std::endl; }', { runMemoryLimit: 16 << 20 });
out.unknown = await client.execute('python', 'print(1)', { version: '2.7.0' });
console.log(JSON.stringify(out));
