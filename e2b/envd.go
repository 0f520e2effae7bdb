package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandcell/sandcell/api"
)

// envd, E2B's in-sandbox agent, served here over api.Sandboxes: the
// process.Process and filesystem.Filesystem services of E2B's protos
// (spec/envd/process/process.proto, spec/envd/filesystem/filesystem.proto)
// in ProtoJSON (lowerCamelCase names, bytes in base64, int64 as a string,
// enums by name, a oneof's field directly in its message), and the plain
// HTTP routes of spec/envd/envd.yaml.

func (h *Handler) envd(w http.ResponseWriter, r *http.Request, id string) {
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, "/process.Process/"):
		h.processRPC(w, r, id, strings.TrimPrefix(p, "/process.Process/"))
	case strings.HasPrefix(p, "/filesystem.Filesystem/"):
		h.filesystemRPC(w, r, id, strings.TrimPrefix(p, "/filesystem.Filesystem/"))
	case p == "/files":
		h.files(w, r, id)
	case p == "/health" && r.Method == http.MethodGet:
		// ServeHTTP found the sandbox.
		w.WriteHeader(http.StatusNoContent)
	case p == "/init" && r.Method == http.MethodPost:
		// The orchestrator's call to envd at start (token, default user,
		// env): here the sandbox was made with all of it; nothing to do.
		w.WriteHeader(http.StatusNoContent)
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("envd: no route %s %s", r.Method, p))
	}
}

// userOf is the user a request runs as: E2B's Basic auth "user:" (sent
// when the caller names one), "" for the default user ("user").
func userOf(r *http.Request) (string, error) {
	name, _, ok := r.BasicAuth()
	if !ok {
		if u := r.URL.Query().Get("username"); u != "" {
			name, ok = u, true
		}
	}
	switch {
	case !ok, name == "", name == "user":
		return "", nil
	case name == "root":
		return "root", nil
	}
	return "", rpcErr("unauthenticated", "user %q: a sandbox has the users user and root", name)
}

// ProtoJSON messages of process.proto.

type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Envs map[string]string `json:"envs"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type ptySize struct {
	Cols uint32 `json:"cols"`
	Rows uint32 `json:"rows"`
}

type ptyJSON struct {
	Size *ptySize `json:"size"`
}

type selector struct {
	PID *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

type startRequest struct {
	Process processConfig `json:"process"`
	PTY     *ptyJSON      `json:"pty"`
	Tag     *string       `json:"tag"`
	Stdin   *bool         `json:"stdin"`
}

type selectRequest struct {
	Process selector `json:"process"`
}

type processInput struct {
	Stdin []byte `json:"stdin,omitempty"`
	PTY   []byte `json:"pty,omitempty"`
}

type sendInputRequest struct {
	Process selector     `json:"process"`
	Input   processInput `json:"input"`
}

type sendSignalRequest struct {
	Process selector        `json:"process"`
	Signal  json.RawMessage `json:"signal"`
}

type updateRequest struct {
	Process selector `json:"process"`
	PTY     *ptyJSON `json:"pty"`
}

type processInfoJSON struct {
	Config processConfig `json:"config"`
	PID    uint32        `json:"pid"`
	Tag    string        `json:"tag,omitempty"`
}

type listResponse struct {
	Processes []processInfoJSON `json:"processes"`
}

type empty struct{}

// streamInputRequest is process.StreamInputRequest: start, then data.
type streamInputRequest struct {
	Start *struct {
		Process selector `json:"process"`
	} `json:"start"`
	Data *struct {
		Input processInput `json:"input"`
	} `json:"data"`
	Keepalive *empty `json:"keepalive"`
}

// specOf maps a Start request onto a process spec. The SDK's commands.run
// sends /bin/bash -l -c CMD (npm e2b 2.51.0 Commands.start), which is what
// api.ProcessSpec.Shell runs; anything else runs as the argv it names.
func specOf(req *startRequest, user string) (api.ProcessSpec, error) {
	c := req.Process
	if c.Cmd == "" {
		return api.ProcessSpec{}, rpcErr("invalid_argument", "process.cmd is empty")
	}
	spec := api.ProcessSpec{Env: c.Envs, User: user, Stdin: true}
	if c.Cmd == "/bin/bash" && len(c.Args) == 3 && c.Args[0] == "-l" && c.Args[1] == "-c" {
		spec.Shell = c.Args[2]
	} else {
		spec.Argv = append([]string{c.Cmd}, c.Args...)
	}
	if c.Cwd != nil {
		spec.Cwd = *c.Cwd
	}
	if req.Stdin != nil {
		spec.Stdin = *req.Stdin
	}
	if req.Tag != nil {
		spec.Tag = *req.Tag
	}
	if req.PTY != nil {
		sz := api.PTYSize{Cols: 80, Rows: 24}
		if req.PTY.Size != nil {
			sz = api.PTYSize{Cols: uint16(min(req.PTY.Size.Cols, 1<<15)), Rows: uint16(min(req.PTY.Size.Rows, 1<<15))}
		}
		spec.PTY = &sz
	}
	return spec, nil
}

// configOf is a spec as process.ProcessConfig.
func configOf(s api.ProcessSpec) processConfig {
	c := processConfig{Envs: s.Env}
	if s.Shell != "" {
		c.Cmd, c.Args = "/bin/bash", []string{"-l", "-c", s.Shell}
	} else if len(s.Argv) > 0 {
		c.Cmd, c.Args = s.Argv[0], s.Argv[1:]
	}
	if c.Args == nil {
		c.Args = []string{}
	}
	if c.Envs == nil {
		c.Envs = map[string]string{}
	}
	if s.Cwd != "" {
		c.Cwd = &s.Cwd
	}
	return c
}

// pidOf resolves a selector to a pid.
func (h *Handler) pidOf(ctx context.Context, id string, sel selector) (int, error) {
	switch {
	case sel.PID != nil:
		return int(*sel.PID), nil
	case sel.Tag != nil:
		p, err := h.sb.FindProcess(ctx, id, 0, *sel.Tag)
		if err != nil {
			return 0, err
		}
		return p.PID, nil
	}
	return 0, rpcErr("invalid_argument", "process: give a pid or a tag")
}

// ended turns err, from acting on process pid, into envd's not_found
// when the process has ended: envd forgets a process at its end, so the
// SDK's kill answers false for it (npm e2b 2.51.0 Commands.kill catches
// NotFoundError), where the service, which keeps an ended process a
// minute for its output, refuses the call as invalid.
func (h *Handler) ended(ctx context.Context, id string, pid int, err error) error {
	if err == nil || !errors.Is(err, api.ErrInvalid) {
		return err
	}
	if p, ferr := h.sb.FindProcess(ctx, id, pid, ""); ferr == nil && p.Exit != nil {
		return rpcErr("not_found", "process with pid %d not found: it has ended", pid)
	}
	return err
}

// signalOf reads a Signal enum: by name (ProtoJSON) or number.
func signalOf(raw json.RawMessage) (int, error) {
	var name string
	if json.Unmarshal(raw, &name) == nil {
		switch name {
		case "SIGNAL_SIGKILL":
			return 9, nil
		case "SIGNAL_SIGTERM":
			return 15, nil
		}
		return 0, rpcErr("invalid_argument", "signal %q: want SIGNAL_SIGKILL or SIGNAL_SIGTERM", name)
	}
	var n int
	if json.Unmarshal(raw, &n) == nil && (n == 9 || n == 15) {
		return n, nil
	}
	return 0, rpcErr("invalid_argument", "signal %s: want SIGNAL_SIGKILL or SIGNAL_SIGTERM", raw)
}

func (h *Handler) processRPC(w http.ResponseWriter, r *http.Request, id, method string) {
	switch method {
	case "Start":
		serveStream(w, r, func(ctx context.Context, s *stream, req *startRequest) { h.start(ctx, r, s, id, req) })
	case "Connect":
		serveStream(w, r, func(ctx context.Context, s *stream, req *selectRequest) {
			pid, err := h.pidOf(ctx, id, req.Process)
			if err != nil {
				s.end(asRPC("process", err))
				return
			}
			h.pump(ctx, r, s, id, pid)
		})
	case "List":
		unary(w, r, func(ctx context.Context, _ *empty) (*listResponse, error) {
			ps, err := h.sb.Processes(ctx, id)
			if err != nil {
				return nil, err
			}
			out := &listResponse{Processes: []processInfoJSON{}}
			for _, p := range ps {
				if p.Exit == nil {
					out.Processes = append(out.Processes, processInfoJSON{Config: configOf(p.Spec), PID: uint32(p.PID), Tag: p.Tag})
				}
			}
			return out, nil
		})
	case "SendInput":
		unary(w, r, func(ctx context.Context, req *sendInputRequest) (*empty, error) {
			pid, err := h.pidOf(ctx, id, req.Process)
			if err != nil {
				return nil, err
			}
			return &empty{}, h.ended(ctx, id, pid, h.sb.SendInput(ctx, id, pid, append(req.Input.Stdin, req.Input.PTY...)))
		})
	case "SendSignal":
		unary(w, r, func(ctx context.Context, req *sendSignalRequest) (*empty, error) {
			sig, err := signalOf(req.Signal)
			if err != nil {
				return nil, err
			}
			pid, err := h.pidOf(ctx, id, req.Process)
			if err != nil {
				return nil, err
			}
			return &empty{}, h.ended(ctx, id, pid, h.sb.Signal(ctx, id, pid, sig))
		})
	case "CloseStdin":
		unary(w, r, func(ctx context.Context, req *selectRequest) (*empty, error) {
			pid, err := h.pidOf(ctx, id, req.Process)
			if err != nil {
				return nil, err
			}
			return &empty{}, h.ended(ctx, id, pid, h.sb.CloseStdin(ctx, id, pid))
		})
	case "Update":
		unary(w, r, func(ctx context.Context, req *updateRequest) (*empty, error) {
			pid, err := h.pidOf(ctx, id, req.Process)
			if err != nil {
				return nil, err
			}
			if req.PTY == nil || req.PTY.Size == nil {
				return &empty{}, nil
			}
			return &empty{}, h.sb.Resize(ctx, id, pid, api.PTYSize{Cols: uint16(min(req.PTY.Size.Cols, 1<<15)), Rows: uint16(min(req.PTY.Size.Rows, 1<<15))})
		})
	case "StreamInput":
		h.streamInput(w, r, id)
	default:
		writeRPCError(w, rpcErr("unimplemented", "process.Process/%s is not a method of envd", method))
	}
}

// start serves Process.Start: start the process, then stream its events.
// Connect-Timeout-Ms (the SDK's timeoutMs, 60 s by default) ends the
// process too, as E2B's does (infra packages/envd/internal/services/
// process/start.go: the header's timeout bounds the process's context, not
// the request's): a background command lives that long unless the caller
// asks for 0, and outlives a client that leaves.
func (h *Handler) start(ctx context.Context, r *http.Request, s *stream, id string, req *startRequest) {
	user, err := userOf(r)
	if err != nil {
		s.end(asRPC("", err))
		return
	}
	spec, err := specOf(req, user)
	if err != nil {
		s.end(asRPC("", err))
		return
	}
	if v := r.Header.Get("Connect-Timeout-Ms"); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			spec.TimeoutMS = ms
		}
	}
	p, err := h.sb.StartProcess(ctx, id, spec)
	if err != nil && errors.Is(err, api.ErrInvalid) && len(spec.Argv) > 0 && spec.Argv[0] == "/bin/bash" {
		// E2B's templates have bash and the SDK names it (pty.create
		// starts /bin/bash -i -l); a root without it (sandcell's default,
		// Debian's base without bash) runs the same flags under /bin/sh,
		// as a commands.run there runs under sh -c (service.findShell).
		spec.Argv[0] = "/bin/sh"
		p, err = h.sb.StartProcess(ctx, id, spec)
	}
	if err != nil {
		s.end(asRPC("starting the process", err))
		return
	}
	h.pump(ctx, r, s, id, p.PID)
}

// keepaliveOf is the keepalive interval the client asks for
// (Keepalive-Ping-Interval, seconds; the SDK sends 50).
func keepaliveOf(r *http.Request) time.Duration {
	if n, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 50 * time.Second
}

// pump streams a process's events as process.ProcessEvent: start first
// (the SDK reads it before it returns a handle), data, end, and keepalives
// when nothing happened for the client's interval.
func (h *Handler) pump(ctx context.Context, r *http.Request, s *stream, id string, pid int) {
	ch, err := h.sb.Events(ctx, id, pid)
	if err != nil {
		s.end(asRPC("process events", err))
		return
	}
	started := false
	send := func(ev map[string]any) error { return s.send(map[string]any{"event": ev}) }
	startEv := map[string]any{"start": map[string]any{"pid": pid}}
	tick := time.NewTicker(keepaliveOf(r))
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := send(map[string]any{"keepalive": map[string]any{}}); err != nil {
				return
			}
			continue
		case ev, ok := <-ch:
			if !ok {
				switch {
				case ctx.Err() != nil:
					s.end(asRPC("process "+strconv.Itoa(pid), ctx.Err()))
				default:
					s.end(rpcErr("unavailable", "process %d: its events ended before it did (the sandbox is gone?)", pid))
				}
				return
			}
			tick.Reset(keepaliveOf(r))
			if !started {
				started = true
				if err := send(startEv); err != nil {
					return
				}
				if ev.Start != nil {
					continue
				}
			}
			var out map[string]any
			switch {
			case ev.Start != nil:
				continue
			case ev.Keepalive:
				out = map[string]any{"keepalive": map[string]any{}}
			case ev.End != nil:
				if ev.End.Reason == reasonSandboxKilled {
					// E2B's stream ends with its sandbox: the connection
					// drops, the SDK's health check finds the sandbox gone
					// and says so (TimeoutError "the sandbox was killed"),
					// where an end event would read as the command's exit.
					panic(http.ErrAbortHandler)
				}
				if ev.End.Reason == reasonTimeout {
					// The process reached the stream's own deadline
					// (Connect-Timeout-Ms): envd's stream ends with
					// deadline_exceeded then (the SDK's TimeoutError),
					// whichever of the two clocks fired first.
					s.end(rpcErr("deadline_exceeded", "process %d: its timeout ended it", pid))
					return
				}
				if err := send(map[string]any{"end": endOf(ev.End)}); err != nil {
					return
				}
				s.end(nil)
				return
			case len(ev.Data) > 0:
				stream := ev.Stream
				if stream != api.StreamStderr && stream != api.StreamPTY {
					stream = api.StreamStdout
				}
				out = map[string]any{"data": map[string]any{stream: base64.StdEncoding.EncodeToString(ev.Data)}}
			default:
				continue
			}
			if err := send(out); err != nil {
				return
			}
		}
	}
}

// reasonSandboxKilled is api.ProcessExit.Reason for a process whose
// sandbox was killed.
const reasonSandboxKilled = "sandbox killed"

// reasonTimeout is api.ProcessExit.Reason for a process ended at its
// TimeoutMS.
const reasonTimeout = "timeout"

// endOf is process.ProcessEvent.EndEvent: as envd (Go's os.ProcessState)
// says it, exit code -1 and exited false for a process a signal ended.
func endOf(e *api.ProcessExit) map[string]any {
	end := map[string]any{"exitCode": e.ExitCode, "exited": true, "status": "exit status " + strconv.Itoa(e.ExitCode)}
	if e.Signal != "" {
		name := strings.ToLower(strings.TrimPrefix(e.Signal, "SIG"))
		switch e.Signal {
		case "SIGKILL":
			name = "killed"
		case "SIGTERM":
			name = "terminated"
		}
		end["exitCode"], end["exited"], end["status"] = -1, false, "signal: "+name
	}
	if e.Error != "" {
		end["error"] = e.Error
	} else if e.Reason != "" {
		end["error"] = e.Reason
	}
	return end
}

// streamInput serves Process.StreamInput, a client stream: a start message
// naming the process, then data messages, in order, until the request body
// ends. HTTP/1.1 carries it (a streamed request body), though no SDK calls
// it: browsers' fetch cannot stream a request body and the SDKs use
// SendInput. The response is a stream of no message and the end.
func (h *Handler) streamInput(w http.ResponseWriter, r *http.Request, id string) {
	if r.Method != http.MethodPost || contentType(r) != "application/connect+json" {
		http.Error(w, "want POST application/connect+json", http.StatusUnsupportedMediaType)
		return
	}
	ctx, cancel := rpcContext(r)
	defer cancel()
	// Read the whole client stream before answering: an HTTP/1.1 server
	// that answers first may not read the rest of the body.
	pid := -1
	var rerr *rpcError
	for {
		flags, msg, err := readEnvelope(r.Body)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				rerr = rpcErr("invalid_argument", "stream: %v", err)
			}
			break
		}
		if flags&flagEndStream != 0 || rerr != nil {
			continue
		}
		var m streamInputRequest
		if err := json.Unmarshal(msg, &m); err != nil {
			rerr = rpcErr("invalid_argument", "message: %v", err)
			continue
		}
		switch {
		case m.Start != nil:
			p, err := h.pidOf(ctx, id, m.Start.Process)
			if err != nil {
				rerr = asRPC("process", err)
				continue
			}
			pid = p
		case m.Data != nil:
			if pid < 0 {
				rerr = rpcErr("failed_precondition", "data before start")
				continue
			}
			if err := h.sb.SendInput(ctx, id, pid, append(m.Data.Input.Stdin, m.Data.Input.PTY...)); err != nil {
				rerr = asRPC("input", err)
			}
		}
	}
	s := newStream(w)
	if rerr == nil {
		s.send(empty{})
	}
	s.end(rerr)
}
