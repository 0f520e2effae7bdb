// A real TypeScript MCP client, unmodified, against sandcell: driven by
// clients_test.go (go test), never run by hand in CI.
//
// usage: node client.mjs SDK MODE TARGET...
//   SDK     v1 (@modelcontextprotocol/sdk) | v2 (@modelcontextprotocol/client)
//   MODE    legacy | auto (v2 only: versionNegotiation.mode)
//   TARGET  http URL, or a command and its arguments (stdio)
// Prints one JSON object {protocolVersion, era, tools, python, timeout,
// badLanguage, resources, confirm, unknownTool} and exits 0; exits 1 with
// the error on stderr.

const [sdk, mode, ...target] = process.argv.slice(2);

async function load() {
  if (sdk === 'v1') {
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    return { Client, StdioClientTransport, StreamableHTTPClientTransport, options: {} };
  }
  const m = await import('@modelcontextprotocol/client');
  const { StdioClientTransport } = await import('@modelcontextprotocol/client/stdio');
  return {
    Client: m.Client,
    StdioClientTransport,
    StreamableHTTPClientTransport: m.StreamableHTTPClientTransport,
    options: { versionNegotiation: { mode } },
  };
}

function text(res) {
  return (res.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

async function main() {
  const { Client, StdioClientTransport, StreamableHTTPClientTransport, options } = await load();
  const client = new Client({ name: `sandcell-conformance-ts-${sdk}`, version: '1.0.0' }, options);
  const transport = target[0].startsWith('http')
    ? new StreamableHTTPClientTransport(new URL(target[0]))
    : new StdioClientTransport({ command: target[0], args: target.slice(1), stderr: 'inherit' });
  await client.connect(transport);
  const out = {
    protocolVersion: client.getNegotiatedProtocolVersion?.(),
    era: client.getProtocolEra?.(),
  };
  const tools = await client.listTools();
  out.tools = tools.tools.map((t) => t.name);

  // The SDK validates structuredContent against outputSchema (AJV) and
  // throws when it is missing on a success: this call proves both.
  const py = await client.callTool({
    name: 'execute_code',
    arguments: { language: 'python', source: "import sys; print(sys.stdin.read()[::-1], end='')", stdin: 'abc' },
  });
  out.python = { isError: !!py.isError, stdout: py.structuredContent?.stdout, status: py.structuredContent?.status };

  const to = await client.callTool({ name: 'execute_code', arguments: { language: 'sh', source: 'sleep 10', timeout_ms: 300 } });
  out.timeout = { isError: !!to.isError, status: to.structuredContent?.status };

  const bad = await client.callTool({ name: 'execute_code', arguments: { language: 'klingon', source: 'x' } });
  out.badLanguage = { isError: !!bad.isError, text: text(bad) };

  // A session's file as a resource (issue #17: in the 2026-07-28 era
  // resources/read lacked ttlMs/cacheScope and v2's auto mode refused
  // it), and a destructive call's confirmation in structuredContent.
  const sess = await client.callTool({ name: 'create_session', arguments: {} });
  const sid = sess.structuredContent?.session_id;
  const wrote = await client.callTool({ name: 'write_file', arguments: { session_id: sid, path: 'notes.txt', content: 'noted' } });
  const uri = (wrote.content || []).find((c) => c.type === 'resource_link')?.uri;
  out.resources = { uri };
  try {
    const list = await client.listResources();
    out.resources.listed = list.resources.some((r) => r.uri === uri);
  } catch (e) {
    out.resources.listError = String(e?.message ?? e);
  }
  try {
    const read = await client.readResource({ uri });
    out.resources.read = read.contents?.[0]?.text;
  } catch (e) {
    out.resources.readError = String(e?.message ?? e);
  }
  const close = await client.callTool({ name: 'close_session', arguments: { session_id: sid } });
  out.confirm = {
    isError: !!close.isError,
    needsConfirmation: close.structuredContent?.needs_confirmation,
    token: close.structuredContent?.confirm_token,
  };

  try {
    await client.callTool({ name: 'nope', arguments: {} });
    out.unknownTool = 'no error';
  } catch (e) {
    out.unknownTool = String(e?.code ?? e?.message ?? e);
  }
  await client.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`client failed: ${e?.stack || e}\n`);
    process.exit(1);
  },
);
