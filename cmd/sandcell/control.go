package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/api"
)

// The control socket (issue #41): `sandcell serve` also listens on a unix
// socket in its instance's directory of the state dir
// (<state>/<instance>/sandcell.sock), and `sandcell run` sends its run
// there when a server of its state dir is up, instead of making an
// instance and a fork server of its own for one run (23-29 ms of a `true`
// run went there). Like docker's
// /run/docker.sock it is root's: 0600, and every connection's peer is
// checked (SO_PEERCRED) on both sides.
//
// The protocol: one connection per run. The client writes one JSON object
// (controlRequest, at most maxControlRequest bytes) and reads one back
// (controlReply). Closing its write side (SIGINT) cancels the run, whose
// result (status cancelled) still comes back. A reply with Fallback set
// (busy, draining, another home) tells the client to run it itself.

// controlSocketName is the socket's name in its server's instance
// directory: each server has its own, gone with the instance (its Close,
// or its reaper after a kill -9, removes the directory), and a client
// finds only those of its own state dir.
const controlSocketName = "sandcell.sock"

// controlVersion is the protocol's version: a server refuses (Fallback)
// a request of another one, as after an upgrade of the binary under a
// running server.
const controlVersion = 1

// noServerEnv, set to 1, makes `sandcell run` never use a server (as
// --standalone).
const noServerEnv = "SANDCELL_NO_SERVER"

// Bounds of one exchange. A request holds at most a source
// (executor.MaxSourceBytes, 4 MiB) and a stdin (MaxStdinBytes, 16 MiB),
// base64 in JSON (4/3): 32 MiB leaves room for args and env. A reply
// holds at most four streams (two phases) of the server's output cap
// (64 MiB at most by default), escaped.
const (
	maxControlRequest = 32 << 20
	maxControlReply   = 512 << 20
	// controlIOTimeout bounds reading a request and writing a reply (not
	// the run: its own limits bound it).
	controlIOTimeout = 30 * time.Second
)

// controlRun is the part of an api.Request that `sandcell run` gives, as
// it goes over the socket. Source and Stdin keep nil apart from empty
// (null and ""): no input is /dev/null, an empty file an empty pipe.
type controlRun struct {
	Language  string     `json:"language,omitempty"`
	Source    []byte     `json:"source"`
	Args      []string   `json:"args,omitempty"`
	Env       []string   `json:"env,omitempty"`
	Stdin     []byte     `json:"stdin"`
	Limits    api.Limits `json:"limits"`
	Isolation string     `json:"isolation,omitempty"`
	Image     string     `json:"image,omitempty"`
}

func (r controlRun) request() api.Request {
	return api.Request{Language: r.Language, Source: r.Source, Args: r.Args, Env: r.Env, Stdin: r.Stdin,
		Limits: r.Limits, Isolation: r.Isolation, Image: r.Image}
}

// controlRequest is what the client sends.
type controlRequest struct {
	Version int `json:"version"`
	// Home is the client's sandcell home: a server of another home (its
	// layers, its images) does not take the run.
	Home string     `json:"home"`
	Run  controlRun `json:"run"`
}

// controlReply is what the server answers: a result (with the limit
// notes, which api.Result does not serialize), a refusal's text as the
// CLI prints it, or a request to run it standalone.
type controlReply struct {
	Result   *api.Result `json:"result,omitempty"`
	Notes    []string    `json:"notes,omitempty"`
	Error    string      `json:"error,omitempty"`
	Fallback string      `json:"fallback,omitempty"`
}

// errSocketRefused is a control socket that fails the checks: it is not
// used (the run goes standalone) and the reason is logged.
var errSocketRefused = errors.New("control socket refused")

// checkControlSocket checks, before anything is sent, that path is a
// socket (lstat: not a symlink) owned by one of owners and not writable
// by others, in a directory (its instance's) owned by one of owners and
// writable by no one else. It defends against a planted socket (socket
// squatting, CWE-283 unverified ownership; CWE-59 link following): a
// user who could place or swap the socket would receive the programs and
// stdin sent to it and could forge their results (CI verdicts). The state
// dir above is checked the same way (findControl), and the peer's own
// uid once connected (checkPeer): the path checks keep the socket from
// being swapped between them.
func checkControlSocket(path string, owners []int) error {
	if err := checkOwnedDir(filepath.Dir(path), owners); err != nil {
		return err
	}
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if st.Mode()&os.ModeType != os.ModeSocket {
		return fmt.Errorf("%w: %s is not a socket (%s)", errSocketRefused, path, st.Mode().Type())
	}
	return checkOwned(path, owners, 0o002)
}

// checkOwnedDir checks that dir is a directory (not a symlink) owned by
// one of owners that no one else can write.
func checkOwnedDir(dir string, owners []int) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: %s is not a directory (%s)", errSocketRefused, dir, st.Mode().Type())
	}
	return checkOwned(dir, owners, 0o022)
}

// checkOwned checks that path (not followed) is owned by one of owners
// and has none of the mode bits of writable.
func checkOwned(path string, owners []int, writable os.FileMode) error {
	st, err := os.Lstat(path)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: %s: no owner", errSocketRefused, path)
	}
	if !slices.Contains(owners, int(sys.Uid)) {
		return fmt.Errorf("%w: %s is owned by uid %d, not by %v", errSocketRefused, path, sys.Uid, owners)
	}
	if m := st.Mode().Perm(); m&writable != 0 {
		return fmt.Errorf("%w: %s is writable by others (mode %#o)", errSocketRefused, path, m)
	}
	return nil
}

// controlOwners are the uids a control socket and its server may have
// for this client: root, or this user (a rootless server, whose files
// are the user's; in the rootless user namespace the user is uid 0).
func controlOwners() []int {
	return slices.Compact([]int{0, os.Geteuid()})
}

// peerUID is the uid of the process at the other end of c (SO_PEERCRED:
// as it was when it connected or listened, in this user namespace).
func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) { cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return -1, err
	}
	if serr != nil {
		return -1, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return int(cred.Uid), nil
}

// checkPeer refuses a peer whose uid is not one of owners.
func checkPeer(c *net.UnixConn, owners []int) error {
	uid, err := peerUID(c)
	if err != nil {
		return fmt.Errorf("%w: %w", errSocketRefused, err)
	}
	if !slices.Contains(owners, uid) {
		return fmt.Errorf("%w: its peer is uid %d, not one of %v", errSocketRefused, uid, owners)
	}
	return nil
}

// dialControl connects to the control socket at path once it passed the
// checks (nil and why not otherwise: no server, or a refused socket).
func dialControl(path string) (*net.UnixConn, error) {
	owners := controlOwners()
	if err := checkControlSocket(path, owners); err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return nil, err
	}
	uc := c.(*net.UnixConn)
	if err := checkPeer(uc, owners); err != nil {
		uc.Close()
		return nil, err
	}
	return uc, nil
}

// findControl connects to a server of stateDir: the first instance
// directory with a control socket that passes the checks and answers.
// It returns why none did (errSocketRefused for a socket refused; the
// state dir's own check first).
func findControl(stateDir string) (*net.UnixConn, string, error) {
	if err := checkOwnedDir(stateDir, controlOwners()); err != nil {
		return nil, stateDir, err
	}
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		return nil, stateDir, err
	}
	var errs []error
	for _, e := range entries {
		path := filepath.Join(stateDir, e.Name(), controlSocketName)
		if !e.IsDir() {
			if _, err := os.Lstat(path); err == nil { // a symlink to a directory
				errs = append(errs, fmt.Errorf("%w: %s is not a directory", errSocketRefused, filepath.Dir(path)))
			}
			continue
		}
		if _, err := os.Lstat(path); err != nil {
			continue // not a server's instance (a run's, a dead one's)
		}
		c, err := dialControl(path)
		if err == nil {
			return c, path, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, stateDir, fmt.Errorf("no control socket in %s", stateDir)
	}
	return nil, stateDir, errors.Join(errs...)
}

// runOnServer sends run to the local server of the state dir, if one
// serves it and passes the checks, and returns its reply; nil when the
// run is to go standalone (no server, a refused socket: logged, a server
// that asks for it).
func runOnServer(ctx context.Context, log *slog.Logger, stateDir, home string, run controlRun) *controlReply {
	c, path, err := findControl(stateDir)
	if err != nil {
		switch {
		case errors.Is(err, errSocketRefused):
			log.Warn("not using the local server: running standalone", "socket", path, "err", err)
		default: // no server (no socket, a dead one's): the usual case
			log.Debug("no local server: running standalone", "socket", path, "err", err)
		}
		return nil
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(controlIOTimeout))
	if err := json.NewEncoder(c).Encode(controlRequest{Version: controlVersion, Home: home, Run: run}); err != nil {
		log.Warn("the local server took no request: running standalone", "socket", path, "err", err)
		return nil
	}
	c.SetWriteDeadline(time.Time{})
	// ^C: the server cancels the run when this side closes, and still
	// answers with its result (cancelled), as a standalone run prints it.
	stop := context.AfterFunc(ctx, func() { c.CloseWrite() })
	defer stop()
	var reply controlReply
	if err := json.NewDecoder(io.LimitReader(c, maxControlReply)).Decode(&reply); err != nil {
		log.Warn("the local server did not answer: running standalone", "socket", path, "err", err)
		return nil
	}
	if reply.Fallback != "" {
		log.Debug("the local server asks for a standalone run", "socket", path, "why", reply.Fallback)
		return nil
	}
	if reply.Result == nil && reply.Error == "" {
		log.Warn("the local server answered neither a result nor an error: running standalone", "socket", path)
		return nil
	}
	log.Debug("ran on the local server", "socket", path)
	return &reply
}

// controlServer serves a server's control socket.
type controlServer struct {
	path string
	ln   *net.UnixListener
	log  *slog.Logger
	wg   sync.WaitGroup
}

// listenControl listens on the control socket in dir, the server's
// instance directory, 0600.
func listenControl(dir string, log *slog.Logger) (*controlServer, error) {
	path := filepath.Join(dir, controlSocketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// Bound with the umask's mode for a moment: every connection's peer
	// is checked (serve), so one made before the chmod is refused all
	// the same unless it is the server's own user.
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &controlServer{path: path, ln: ln, log: log}, nil
}

// serve answers each connection with handle until ctx ends or the
// listener is closed; at most maxConns connections at once.
func (s *controlServer) serve(ctx context.Context, handle func(context.Context, controlRequest) controlReply) {
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	slots := make(chan struct{}, maxConns)
	for {
		slots <- struct{}{} // past maxConns, new connections wait in the backlog
		c, err := s.ln.AcceptUnix()
		if err != nil {
			<-slots
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("control socket: accept", "err", err)
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return
		}
		s.wg.Add(1)
		go func() {
			defer func() { <-slots; s.wg.Done() }()
			s.conn(ctx, c, handle)
		}()
	}
}

// conn serves one connection: one request, one reply.
func (s *controlServer) conn(ctx context.Context, c *net.UnixConn, handle func(context.Context, controlRequest) controlReply) {
	defer c.Close()
	// Only the server's own user (root) may run through it, whatever the
	// socket's mode.
	if err := checkPeer(c, []int{os.Geteuid()}); err != nil {
		s.log.Warn("control socket: connection refused", "err", err)
		return
	}
	c.SetReadDeadline(time.Now().Add(controlIOTimeout))
	var req controlRequest
	if err := json.NewDecoder(io.LimitReader(c, maxControlRequest)).Decode(&req); err != nil {
		s.log.Warn("control socket: a request that does not decode", "err", err)
		return
	}
	c.SetReadDeadline(time.Time{})
	var reply controlReply
	if req.Version != controlVersion {
		reply.Fallback = fmt.Sprintf("protocol version %d, this server speaks %d", req.Version, controlVersion)
	} else {
		// The client closing its side (^C, or its death) cancels the run.
		rctx, cancel := context.WithCancel(ctx)
		go func() {
			io.Copy(io.Discard, c)
			cancel()
		}()
		reply = handle(rctx, req)
		cancel()
	}
	c.SetWriteDeadline(time.Now().Add(controlIOTimeout))
	if err := json.NewEncoder(c).Encode(reply); err != nil {
		s.log.Debug("control socket: reply not delivered", "err", err)
	}
}

// Close stops listening, removes the socket and waits for the
// connections in flight.
func (s *controlServer) Close() {
	s.ln.Close()
	s.wg.Wait()
}
