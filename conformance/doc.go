// Package conformance proves sandcell's hand-written MCP layer with real
// clients that no one here wrote, unmodified: the official Go SDK (in this
// nested module, so that sandcell's own go.mod stays SDK-free), the
// TypeScript SDK v1 and v2, the Inspector CLI and the official conformance
// suite (npm packages pinned in package-lock.json; run `npm ci` here).
//
// The end-to-end tests run `sandcell serve` for real (root and the layers
// needed: they skip otherwise, except with CI=true, where they fail). The
// conformance scenarios that expect the reference server's own fixture
// tools, prompts and resources run against ./fixture, a server built on
// sandcell's mcp package in this test tree, never in the product binary.
package conformance
