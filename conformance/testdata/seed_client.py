# The seed's programmatic Python client, as written, with only the URL
# changed (the seed's Go program runs in sandcell's go layer). It uses requests
# when installed and falls back to urllib with the same JSON body and
# headers otherwise (pip cannot reach PyPI here).
import json
import sys

url = sys.argv[1]
payload = {
    "jsonrpc": "2.0",
    "method": "call_tool",
    "params": {
        "tool": "execute_code",
        "arguments": {
            "language": "go",
            "source": "package main\nimport \"fmt\"\nfunc main(){fmt.Println(\"MCP Go\")}"
        }
    },
    "id": 1
}

try:
    import requests
    resp = requests.post(
        url,
        json=payload,
        headers={"Content-Type": "application/json"}
    )
    print(resp.json()["result"]["stdout"])
except ImportError:
    import urllib.request
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req) as r:
        print(json.loads(r.read())["result"]["stdout"])
