// Package verdict judges a finished run: it turns an api.Result (and, if
// there is one, the output a program was expected to print) into a verdict
// named as Judge0 names its statuses, in snake case: accepted,
// wrong_answer, compile_error, runtime_error, time_limit_exceeded,
// memory_limit_exceeded, output_limit_exceeded, and sandcell's own
// cancelled and internal_error. It is the one judge of two front ends:
// batch writes the verdict on each output line, and rest's Judge0 adapter
// maps it onto Judge0's status ids. Neither imports the other. (How a
// run ended, api.Status, is the runtime's to say; a verdict is what that
// means for the program, judged against what it should have done.)
//
// Invariant: a verdict is a function of the result and the expected
// output alone (no I/O, no clock, no configuration), and its names are the
// JSON strings users see (batch output's "verdict"); they never change.
//
// Why here and not in api: api holds what crosses the wire, a request and
// its result, and api.Result carries no verdict. Judging is a policy laid
// over a result (which status beats which, which whitespace does not
// count), used by some front ends and not others (the MCP tools and `run`
// show the result as it is). So it sits just above api, as a leaf of
// internal/ that imports api and nothing else of sandcell's.
package verdict
