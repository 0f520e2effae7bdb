// Package batch evaluates a file of programs: one JSON object a line
// {id, language, source, stdin?, expected_output?, limits?}, or the
// HumanEval-X benchmark (its canonical solutions or a model's samples).
// Every line runs through the executor as `sandcell run` would (compile
// and run phases in fresh sandboxes), a bounded number at a time, and gets
// one output line: the run's result (api.Result, the JSON of `run --json`)
// with its id and, when it can be judged, a verdict (internal/verdict's,
// in Judge0's names: accepted, wrong_answer, compile_error...): by the
// expected output, or for HumanEval-X by the benchmark harness's rule.
//
// Invariant: a batch is resumable. Outputs are appended one write a line;
// a rerun skips the ids whose output is there (but for errors, internal
// errors and cancelled runs, which run again), and drops a torn last line.
package batch
