// Package e2b serves E2B's APIs over sandcell's live sandboxes (issue #43),
// so that the unmodified e2b and @e2b/code-interpreter SDKs, pointed at one
// sandcell by E2B_API_URL and E2B_SANDBOX_URL, run against it:
//
//   - the control plane (POST /sandboxes and /v2/sandboxes, list, get,
//     kill, timeout, pause, resume, connect), behind an operator's API keys;
//   - envd, the in-sandbox agent, over Connect RPC with the JSON codec
//     (process.Process, filesystem.Filesystem) and plain HTTP (/files,
//     /health), reached by the E2b-Sandbox-Id and E2b-Sandbox-Port headers
//     (or a Host of the form PORT-ID.DOMAIN) and opened only by that
//     sandbox's access token;
//   - the code interpreter (port 49999: /execute, /contexts) over Kernels;
//   - any other port of a sandbox, proxied through api.Sandboxes.DialPort.
//
// Facts of the wire protocol are taken from the SDKs (npm e2b 2.51.0 and
// @e2b/code-interpreter 2.8.0, dist/index.mjs), E2B's protos
// (spec/envd/{process,filesystem}) and infra's OpenAPI spec; docs/e2b.md
// maps each call onto api.Sandboxes.
package e2b
