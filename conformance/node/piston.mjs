// The npm package piston-client, its code unmodified, against sandcell's
// Piston v2 API: driven by rest_test.go (go test), never run by hand in CI.
//
// usage: node --import ./node/json-header.mjs piston.mjs URL
// (json-header.mjs: the client's posts with the Content-Type Piston
// requires; without it Piston, and sandcell, answer 415: unmodified.mjs)
// Prints one JSON object {runtimes, python, javascript, c, cpp, bash,
// compileError, timeout, stdinArgs, phaseLimits, unknown, sh, multiFile,
// javaTest, javaSolution, order, truncated} (each an answer of the client
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
// The flows of issue 38. sh is Piston's bash (its alias).
out.sh = await client.execute('sh', 'echo "$BASH_VERSION" | cut -d. -f1', { version: '*' });
// Every file of a multi-file C++ program is compiled and linked; the
// header only included.
out.multiFile = await client.execute({
  language: 'c++',
  version: '*',
  files: [
    { name: 'main.cpp', content: '#include <iostream>\n#include "add.h"\nint main() { std::cout << add(2, 3) << std::endl; }' },
    { name: 'add.cpp', content: '#include "add.h"\nint add(int a, int b) { return a + b; }' },
    { name: 'add.h', content: 'int add(int a, int b);' },
  ],
});
// Piston's own java test program (packages/java/15.0.2/test.java), as its
// CI sends it (the CLI: the file's base name), and an unnamed class Solution.
out.javaTest = await client.execute({
  language: 'java',
  version: '*',
  files: [{ name: 'test.java', content: 'public class HelloWorld {\n    public static void main(String[] args) {\n        System.out.println("OK");\n    }\n}' }],
  args: [],
  runTimeout: 10000,
});
out.javaSolution = await client.execute('java', 'class Solution {\n  public static void main(String[] args) { System.out.println("solved " + args.length); }\n}', { runTimeout: 10000 });
// stdout and stderr in output in the order written (10 ms apart here:
// closer writes may land in both pipes before the reader wakes).
out.order = await client.execute('python', 'import sys, time\nfor i in range(5):\n    print("out", i, flush=True)\n    time.sleep(0.01)\n    print("err", i, file=sys.stderr, flush=True)\n    time.sleep(0.01)');
// Output past the cap (1 MiB by default): cut, with no sandcell note.
out.truncated = await client.execute('python', 'import sys\nsys.stdout.write("x" * (2 << 20))');
console.log(JSON.stringify(out));
