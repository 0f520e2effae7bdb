// Package mcp is sandcell's Model Context Protocol layer, written by hand:
// a JSON-RPC 2.0 codec, one dispatch table for every method of both
// protocol eras (the initialize handshake, 2024-11-05 to 2025-11-25, and the
// stateless 2026-07-28), typed tools whose arguments are validated against
// schemas generated from Go structs before a handler runs, and three
// transports: newline-delimited JSON on stdio and on TCP connections
// (ServeStream, ServeTCP) and Streamable HTTP (NewHTTPHandler).
//
// Its invariant: every byte on the wire is produced here. Whatever a client
// sends, the answer is a well-formed JSON-RPC message (or, on HTTP, a
// status with one), and the server stays up. A tool's failure (bad
// arguments, a program that failed or timed out) is a result with isError,
// which the model can read and act on; only unknown methods and tools and
// malformed requests are protocol errors.
//
// The package knows nothing of containers: tools reach sandboxes through
// interfaces it defines itself (Executor, Sandbox, Installer, Kernels,
// Images), which package service implements and cmd/sandcell wires. Of
// sandcell's packages it imports only api and limits (types).
//
// A server with one tool, on stdio:
//
//	s := mcp.NewServer(&mcp.Options{Name: "sandcell", Version: version, Logger: log})
//	mcp.AddExecuteCode(s, executor, &mcp.ExecuteToolOptions{Languages: []string{"python", "sh"}})
//	err := s.ServeStream(ctx, os.Stdin, os.Stdout)
//
// The seed's legacy shape is accepted in the same table: methods list_tools
// and call_tool {tool, arguments}, without "jsonrpc" and without
// initialize; call_tool answers with the tool's flat result object.
package mcp
