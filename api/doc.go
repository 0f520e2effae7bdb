// Package api holds sandcell's wire types: what a request asks for and what
// a run returns, each defined once and used unchanged by every layer (oci,
// internal/workspace, executor, service, batch, mcp and the CLI).
//
// Invariant: the JSON field names here are part of sandcell's interface.
// The CLI's `run --json`, MCP structuredContent (and its outputSchema,
// inferred from the jsonschema tags), batch output lines and the seed's
// flat call_tool result all print these types as they are; changing a
// name or a tag changes the product. The golden MCP transcripts
// (mcp/testdata/transcripts) and TestResultJSON keep them.
//
// The package also defines the classes of refusal (ErrInvalid, ErrBusy):
// each package that refuses a request defines its own sentinel errors in
// one of these classes (see Invalid), so that an edge (the MCP tools, the
// CLI, a REST adapter) tells "the caller can fix this" from "sandcell
// failed" with errors.Is, whatever package decided.
//
// It imports nothing of sandcell's.
package api
