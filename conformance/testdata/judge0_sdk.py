"""The official Judge0 Python SDK (judge0 0.0.8, unmodified, from its tagged
source) runs its README's flows against sandcell's Judge0 API.

Usage: judge0_sdk.py ENDPOINT SDK_SRC

SDK_SRC is the SDK's src directory (holding judge0/). httpx may come from
Debian's python3-httpx (/usr/lib/python3/dist-packages, appended to the
path so that this interpreter's own packages, pydantic 2, come first).
Prints one JSON object: each flow's outcome.
"""

import json
import sys

endpoint, sdk_src = sys.argv[1], sys.argv[2]
sys.path.insert(0, sdk_src)
sys.path.append("/usr/lib/python3/dist-packages")

import judge0  # noqa: E402

out = {}


def flow(name):
    def wrap(f):
        try:
            out[name] = f()
        except Exception as e:  # the test prints what failed
            out[name] = {"exception": f"{type(e).__name__}: {e}"}
        return f

    return wrap


client = judge0.Client(endpoint)
out["client"] = {
    "version": client.version,
    "languages": len(client.languages),
    "cpu_time_limit": client.config.cpu_time_limit,
    "memory_limit": client.config.memory_limit,
    "cpp_supported": client.is_language_supported(judge0.CPP),
}


def result(r):
    return {"stdout": r.stdout, "stderr": r.stderr, "status": int(r.status) if r.status is not None else None,
            "time": r.time, "memory": r.memory, "compile_output": r.compile_output}


@flow("hello_python")
def _():
    return result(judge0.run(client=client, source_code="print('hello, world')", language=judge0.PYTHON))


@flow("hello_c")
def _():
    src = '\n#include <stdio.h>\n\nint main() {\n    printf("hello, world\\n");\n    return 0;\n}\n'
    return result(judge0.run(client=client, source_code=src, language=judge0.C))


@flow("hello_cpp")
def _():
    src = '#include <iostream>\nint main() { std::cout << "hello, c++" << std::endl; }\n'
    return result(judge0.run(client=client, source_code=src, language=judge0.CPP))


@flow("stdin_c")
def _():
    src = ('\n#include <stdio.h>\n\nint main() {\n    int a, b;\n    scanf("%d %d", &a, &b);\n    printf("%d\\n", a + b);\n\n'
           '    char name[10];\n    scanf("%s", name);\n    printf("Hello, %s!\\n", name);\n\n    return 0;\n}\n')
    return result(judge0.run(client=client, source_code=src, stdin="\n3 5\nBob\n", language=judge0.C))


@flow("test_cases")
def _():
    # The README's call names no language: the SDK's default,
    # PYTHON_FOR_ML, is Judge0 Extra CE's, which no CE server (Judge0's
    # own included) serves; a CE user names Python.
    results = judge0.run(
        client=client,
        language=judge0.PYTHON,
        source_code="print(f'Hello, {input()}!')",
        test_cases=[
            ("Bob", "Hello, Bob!"),
            {"input": "Alice", "expected_output": "Hello, Alice!"},
            ["Charlie", "Hello, Charlie!"],
        ],
    )
    return [result(r) for r in results]


@flow("test_cases_languages")
def _():
    submissions = [
        judge0.Submission(source_code="print(f'Hello, {input()}!')", language=judge0.PYTHON),
        judge0.Submission(
            source_code='\n#include <stdio.h>\n\nint main() {\n    char name[10];\n    scanf("%s", name);\n'
                        '    printf("Hello, %s!\\n", name);\n    return 0;\n}\n',
            language=judge0.C,
        ),
    ]
    test_cases = [("Bob", "Hello, Bob!"), ("Alice", "Hello, Alice!"), ("Charlie", "Hello, Charlie!")]
    results = judge0.run(client=client, submissions=submissions, test_cases=test_cases)
    return [result(r) for r in results]


@flow("binary_output")
def _():
    r = judge0.run(client=client, source_code="import sys; sys.stdout.buffer.write(b'a\\xfeb\\n')", language=judge0.PYTHON)
    # The SDK decodes Base64 with errors="backslashreplace": 0xFE is "\\xfe".
    return {"stdout": r.stdout, "status": int(r.status)}


@flow("execute_async")
def _():
    sub = judge0.async_execute(client=client, source_code="print(6*7)", language=judge0.PYTHON)
    r = judge0.wait(client=client, submissions=sub)
    return result(r)


print(json.dumps(out))
