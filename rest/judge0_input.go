package rest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/executor"
	"github.com/sandcell/sandcell/limits"
)

// fieldErrors are Rails' validation errors: attribute -> messages (422).
type fieldErrors map[string][]string

func (e fieldErrors) add(field, format string, args ...any) {
	e[field] = append(e[field], fmt.Sprintf(format, args...))
}

// judge0Input is a submission's request, checked: what runs, and the
// attributes as they are shown back.
type judge0Input struct {
	lang     judge0Language
	source   []byte
	stdin    []byte
	expected *string
	args     []string

	compilerOptions, commandLineArgs, callbackURL *string
	compilerArgs                                  []string   // compiler_options, split
	additionalFiles                               []byte     // the zip as sent
	files                                         []api.File // its files, unpacked

	numberOfRuns                    int
	cpuLimit, extraTime, wallLimit  float64 // seconds, as shown
	memoryKB, stackKB, procs, fsize int64
	redirect                        bool
	network                         bool // enable_network

	req       api.Request // what Execute gets
	cpuLimitM int64       // the CPU limit asked, ms: over it is Time Limit Exceeded (the extra time is grace)
}

// size is what an input holds in memory.
func (in *judge0Input) size() int64 {
	n := int64(len(in.source) + len(in.stdin) + len(in.additionalFiles) + 1024)
	for _, f := range in.files {
		n += int64(len(f.Data))
	}
	if in.expected != nil {
		n += int64(len(*in.expected))
	}
	return n
}

// parse checks a submission's attributes as Judge0's model validates
// them, with Rails' messages; limits are bounded by sandcell's ceilings
// instead of Judge0's MAX_* settings. Unknown attributes are ignored, as
// Rails' permit does. A submission with something wrong gets every
// attribute's errors at once (422); an error is the server's own.
func (j *judge0) parse(raw json.RawMessage, b64 bool) (*judge0Input, fieldErrors, error) {
	a := j0Attrs{errs: fieldErrors{}, b64: b64}
	if err := json.Unmarshal(raw, &a.m); err != nil || a.m == nil {
		a.errs.add("base", "the submission is not a JSON object: %s", jsonErr(err))
		return nil, a.errs, nil
	}
	in := &judge0Input{}
	if err := j.program(a, in); err != nil {
		return nil, nil, err
	}
	a.options(in)
	if in.callbackURL != nil && strings.TrimSpace(*in.callbackURL) != "" {
		switch {
		case j.callbacks == nil:
			a.errs.add("callback_url", "setting callback is not allowed")
		default:
			if err := j.callbacks.target(context.Background(), *in.callbackURL); err != nil {
				a.errs.add("callback_url", "%v", err)
			}
		}
	}
	if in.network && len(j.h.networkAllow(in.lang.lang.Name)) == 0 {
		// Judge0's words when ALLOW_ENABLE_NETWORK is off; here the
		// operator allows this language no host.
		a.errs.add("enable_network", "enabling network is not allowed")
	}
	asked := a.limits(j.conf)
	if len(a.errs) > 0 {
		return nil, a.errs, nil
	}
	if err := j.build(in, asked); err != nil {
		a.errs.add("base", "%v", err)
		return nil, a.errs, nil
	}
	return in, nil, nil
}

// j0Attrs are a submission's attributes as sent, and what is wrong with
// them so far: each reader adds its attribute's errors to errs, with
// Rails' messages, and reports whether it has a value to use.
type j0Attrs struct {
	m    map[string]json.RawMessage
	errs fieldErrors
	b64  bool // base64_encoded: the text attributes are Base64
}

// program reads what runs: the language, the source, stdin and the
// expected output. An error is the server's (listing its languages).
func (j *judge0) program(a j0Attrs, in *judge0Input) error {
	id, given, ok := j0Number(a.m["language_id"])
	switch {
	case !given:
		a.errs.add("language_id", "can't be blank")
	case !ok:
		a.errs.add("language_id", "is not a number")
	default:
		l, found, err := j.lookup(int(id))
		if err != nil {
			return err
		}
		if !found {
			a.errs.add("language_id", "language with id %d doesn't exist", int64(id))
		}
		in.lang = l
	}
	src, _ := a.text("source_code", executor.MaxSourceBytes)
	if len(src) == 0 && a.errs["source_code"] == nil {
		a.errs.add("source_code", "can't be blank")
	}
	in.source = src
	in.stdin, _ = a.text("stdin", executor.MaxStdinBytes)
	if exp, ok := a.text("expected_output", executor.MaxStdinBytes); ok {
		s := string(exp)
		in.expected = &s
	}
	return nil
}

// options reads the run's options, enabled as 1.13.1 enables them by
// default: compiler_options and command_line_arguments (split into argv,
// never given to a shell), additional_files (a zip, unpacked into /work
// within bounds), callback_url (checked by parse against the operator's
// allowlist). Refused in Judge0's words for a server that does not allow
// them: the network and per-process limits.
func (a j0Attrs) options(in *judge0Input) {
	in.compilerOptions, in.compilerArgs = a.argv("compiler_options")
	if s, given, ok := j0String(a.m["callback_url"]); !ok {
		a.errs.add("callback_url", "is not a string")
	} else if given {
		in.callbackURL = &s
	}
	in.additionalFiles, in.files = a.additionalFiles()
	for _, f := range []string{"enable_per_process_and_thread_time_limit", "enable_per_process_and_thread_memory_limit"} {
		if v, _ := a.boolean(f); v {
			a.errs.add(f, "this option cannot be enabled")
		}
	}
	in.network, _ = a.boolean("enable_network")
	in.redirect, _ = a.boolean("redirect_stderr_to_stdout")
	in.commandLineArgs, in.args = a.argv("command_line_arguments")
}

// argv reads compiler_options or command_line_arguments: the text as
// given (nil if not), and the arguments it makes, split as Judge0's bash
// would split them (and never given to a shell).
func (a j0Attrs) argv(name string) (*string, []string) {
	s, given, ok := j0String(a.m[name])
	switch {
	case !ok:
		a.errs.add(name, "is not a string")
		return nil, nil
	case !given:
		return nil, nil
	case len(s) > judge0MaxOptions:
		a.errs.add(name, "is too long (maximum is %d characters)", judge0MaxOptions)
		return &s, nil
	}
	args, err := splitArgs(s)
	if err == nil {
		err = checkArgs(args)
	}
	if err != nil {
		a.errs.add(name, "%v", err)
		return &s, nil
	}
	return &s, args
}

// judge0Asked is what a submission asks of its runs, checked against
// sandcell's ceilings: the limits Execute gets (zero: the language's
// default), and Judge0's settings that are not a run's limits.
type judge0Asked struct {
	lim     api.Limits
	runs    int     // number_of_runs (1 if not given)
	extra   float64 // cpu_extra_time, seconds
	stackKB *int64  // stack_limit (nil if not given)
}

// limits reads the limits, in Judge0's units (seconds, KB), within
// Judge0's MAX_* ceilings (k, lowered to the server's). Not given (or 0
// for the CPU time) means Judge0's default, applied by build.
func (a j0Attrs) limits(k judge0Conf) judge0Asked {
	runs, okRuns := a.number("number_of_runs", 0, false, judge0MaxRuns)
	cpu, okCPU := a.number("cpu_time_limit", 0, true, k.maxCPU)
	extra, okExtra := a.number("cpu_extra_time", 0, true, k.maxExtra)
	wall, okWall := a.number("wall_time_limit", 1, true, k.maxWall)
	memMin := max(judge0MinMemoryKB, float64(limits.MinMemoryBytes>>10))
	mem, okMem := a.number("memory_limit", memMin, true, float64(k.maxMem))
	stack, okStack := a.number("stack_limit", 0, true, float64(k.maxStack))
	procs, okProcs := a.number("max_processes_and_or_threads", 0, false, float64(k.maxProcs))
	fsize, okFsize := a.number("max_file_size", 0, true, float64(k.maxFsize))
	as := judge0Asked{runs: 1, extra: k.extra}
	if okRuns {
		as.runs = int(runs)
	}
	if okExtra {
		as.extra = extra
	}
	if okStack {
		kb := int64(stack)
		as.stackKB = &kb
	}
	if okCPU && cpu > 0 {
		as.lim.CPUTimeMS = int64(math.Ceil(cpu * 1000))
	}
	if okWall {
		as.lim.TimeoutMS = int64(math.Ceil(wall * 1000))
	}
	if okMem {
		as.lim.MemoryMB = int64(math.Ceil(mem / 1024))
	}
	if okProcs {
		as.lim.Pids = int64(procs)
	}
	if okFsize && fsize > 0 {
		as.lim.FileBytes = int64(fsize) << 10
	}
	return as
}

// judge0Defaults fills the limits a submission did not ask with Judge0's
// defaults (k), except where the language's catalogue entry asks more
// (a JVM's memory, a Go program's threads): then the language's own.
func judge0Defaults(lim, lang api.Limits, k judge0Conf) api.Limits {
	fill := func(v *int64, langV, def int64) {
		if *v == 0 && langV <= def {
			*v = def
		}
	}
	fill(&lim.CPUTimeMS, lang.CPUTimeMS, int64(k.cpu*1000))
	fill(&lim.TimeoutMS, lang.TimeoutMS, int64(k.wall*1000))
	fill(&lim.MemoryMB, lang.MemoryMB, (k.mem+1023)/1024)
	fill(&lim.Pids, lang.Pids, k.procs)
	fill(&lim.FileBytes, lang.FileBytes, k.fsize<<10)
	return lim
}

// build settles a checked submission's limits (the language's, merged
// with those asked: an error if they do not fit together), as Execute
// applies them and as they are shown back, and builds its request.
func (j *judge0) build(in *judge0Input, as judge0Asked) error {
	lang := in.lang.lang
	lim := judge0Defaults(as.lim, lang.Limits, j.conf)
	set, _, err := j.h.opts.Executor.PhaseLimits(lang.Limits, lim)
	if err != nil {
		return err
	}
	in.cpuLimitM = set.CPUTime.Milliseconds()
	if as.extra > 0 {
		// isolate's -x: the program may run on for the extra time, and is
		// still over its limit (Time Limit Exceeded) if it used more than
		// cpu_time_limit.
		lim.CPUTimeMS = in.cpuLimitM + int64(math.Ceil(as.extra*1000))
	}
	in.numberOfRuns = as.runs
	in.cpuLimit, in.extraTime, in.wallLimit = float64(in.cpuLimitM)/1000, as.extra, set.Timeout.Seconds()
	in.memoryKB, in.procs, in.fsize = set.MemoryBytes>>10, set.Pids, set.FileBytes>>10
	// sandcell sets no stack rlimit of its own: the stack is bounded by
	// the memory limit. stack_limit is checked and shown, not applied.
	in.stackKB = min(j.conf.stack, in.memoryKB)
	if as.stackKB != nil {
		in.stackKB = *as.stackKB
	}
	in.req = api.Request{Language: lang.Name, Source: in.source, Args: in.args, Limits: lim,
		Files: withoutSource(in.files, lang.Source), CompilerOptions: in.compilerArgs,
		// The compile phase has the server's limits for the language,
		// whatever the submission's (Judge0 compiles under its MAX_*).
		CompileLimits: &api.Limits{}}
	if in.stdin != nil {
		in.req.Stdin = in.stdin
	}
	if in.network {
		// Judge0 CE's enable_network: the program gets the network the
		// operator allows its language, all of it.
		in.req.Network = &api.Network{Allow: j.h.networkAllow(lang.Name)}
	}
	return nil
}

// text reads a text attribute (decoded from Base64 if the submission's
// text is), at most maxBytes long.
func (a j0Attrs) text(name string, maxBytes int) ([]byte, bool) {
	s, given, ok := j0String(a.m[name])
	if !ok {
		a.errs.add(name, "is not a string")
		return nil, false
	}
	if !given {
		return nil, false
	}
	b := []byte(s)
	if a.b64 {
		var err error
		if b, err = decodeBase64(s); err != nil {
			a.errs.add(name, "is not valid Base64 (base64_encoded=true): %v", err)
			return nil, false
		}
	}
	if len(b) > maxBytes {
		a.errs.add(name, "is too long (maximum is %d characters)", maxBytes)
		return nil, false
	}
	return b, true
}

// number reads a numeric attribute within [minV, maxV] (minV itself
// allowed if minIncl).
func (a j0Attrs) number(name string, minV float64, minIncl bool, maxV float64) (float64, bool) {
	v, given, ok := j0Number(a.m[name])
	switch {
	case !given:
		return 0, false
	case !ok:
		a.errs.add(name, "is not a number")
	case minIncl && v < minV:
		a.errs.add(name, "must be greater than or equal to %s", j0Num(minV))
	case !minIncl && v <= minV:
		a.errs.add(name, "must be greater than %s", j0Num(minV))
	case v > maxV:
		a.errs.add(name, "must be less than or equal to %s", j0Num(maxV))
	default:
		return v, true
	}
	return 0, false
}

// boolean reads a boolean attribute as Rails casts one: true/false,
// "true", "false", 1/0, "1"/"0", "t"/"f", "on"/"off".
func (a j0Attrs) boolean(name string) (bool, bool) {
	raw := a.m[name]
	t := strings.TrimSpace(string(raw))
	if len(raw) == 0 || t == "null" {
		return false, false
	}
	if s, err := strconv.Unquote(t); err == nil {
		t = s
	}
	switch strings.ToLower(t) {
	case "true", "1", "t", "on":
		return true, true
	case "false", "0", "f", "off", "":
		return false, true
	}
	a.errs.add(name, "is not a boolean")
	return false, false
}

// j0String reads a text attribute: a string, or null/absent (given
// false). A number is its text, as Rails casts it.
func j0String(raw json.RawMessage) (s string, given, ok bool) {
	t := strings.TrimSpace(string(raw))
	switch {
	case len(raw) == 0 || t == "null":
		return "", false, true
	case t[0] == '"':
		err := json.Unmarshal(raw, &s)
		return s, true, err == nil
	case t[0] == '-' || (t[0] >= '0' && t[0] <= '9'):
		return t, true, true
	}
	return "", true, false
}

// j0Number reads a numeric attribute: a JSON number or a numeric string
// ("4", as the docs' own example sends language_id).
func j0Number(raw json.RawMessage) (v float64, given, ok bool) {
	t := strings.TrimSpace(string(raw))
	if len(raw) == 0 || t == "null" {
		return 0, false, true
	}
	if t[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil || strings.TrimSpace(s) == "" {
			return 0, strings.TrimSpace(s) != "", false
		}
		t = strings.TrimSpace(s)
	}
	v, err := strconv.ParseFloat(t, 64)
	return v, true, err == nil && !math.IsInf(v, 0) && !math.IsNaN(v)
}

// j0Num formats a number as the messages show it.
func j0Num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// splitArgs splits command_line_arguments as the run script's bash does:
// Judge0 first removes $ & ; < > | and backquotes (isolate_job.rb), then
// words split on blanks, with single quotes, double quotes and backslashes.
func splitArgs(s string) ([]string, error) {
	s = strings.Map(func(r rune) rune {
		if strings.ContainsRune("$&;<>|`", r) {
			return -1
		}
		return r
	}, strings.TrimSpace(s))
	var (
		args  []string
		cur   strings.Builder
		inArg bool
		quote rune
	)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"':
				quote = 0
			case r == '\\' && i+1 < len(rs) && strings.ContainsRune(`"\`, rs[i+1]):
				i++
				cur.WriteRune(rs[i])
			default:
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inArg = r, true
		case r == '\\':
			if i+1 < len(rs) {
				i++
				cur.WriteRune(rs[i])
			}
			inArg = true
		case r == ' ' || r == '\t' || r == '\n':
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteRune(r)
			inArg = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("has an unterminated %c quote", quote)
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args, nil
}
