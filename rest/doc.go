// Package rest serves the REST APIs of three other code runners on
// sandcell's HTTP listener, so that their existing clients work unchanged:
// Piston v2 (GET /api/v2/runtimes, POST /api/v2/execute, the /api/v2/connect
// WebSocket; piston.go, piston_ws.go), Judge0 CE v1.13.1 (/submissions,
// /submissions/batch, /languages, /statuses; judge0*.go) and SandboxFusion's
// POST /run_code, which RL trainers call (fusion.go; its fetch_files read
// back through executor.FetchWork).
//
// Invariant: both are thin adapters over the executor. A request is
// translated into one executor.Request (the language, its files, stdin,
// arguments, limits per phase) and run by Options.Executor, admitted by
// Options.Admit (the server's gate, the same as the MCP tools'); its
// api.Result is translated back. There is no second run path, and no
// verdict of our own: Judge0's expected-output comparison is
// internal/verdict's, the one sandcell batch judges by (rest imports no
// other front end). Everything an adapter refuses (malformed JSON, an
// unknown language or version, a source over executor.MaxSourceBytes,
// limits outside [minimum, ceiling], hostile base64 or hex) is refused
// before Execute is called, in the API's own error shape (Piston:
// {"message": ...}; Judge0: {"error": ...} or its per-field map), so a bad
// request never reaches a sandbox.
//
// What the server holds for a client is bounded: request bodies
// (Options.MaxBodyBytes), Judge0's submissions (a count, their bytes, an
// expiry; they live in memory only), a WebSocket's buffered stdin and
// output (the output cap of each stream), its time (Piston's one second to
// send init, then the run's own limits).
package rest
