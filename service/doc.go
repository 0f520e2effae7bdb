// Package service is sandcell's MCP sandbox: it implements the tools'
// Sandbox and Installer interfaces (package mcp) over the executor and the
// sessions' workspaces (internal/workspace). It owns what a request needs
// beyond running it:
//   - sessions: one run or file change at a time per session (its lock),
//     its files as the run's /work, what a run changed, idle expiry, the
//     dependency sets installed for it (kept with the session on disk);
//   - admission: the gate (gate.go) bounds the runs at once and those
//     waiting, and refuses past both with api.BusyError;
//   - the MCP server itself, with sandcell's instructions (NewServer).
//
// A request's path: mcp tool -> Service.Execute (session lock, the
// session's files and installed sets) -> executor.Execute (admitted by
// the gate before its first sandbox) -> oci.
package service
