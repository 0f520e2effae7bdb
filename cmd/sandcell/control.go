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
// socket in its state dir, and `sandcell run` sends its run there when a
// server is up, instead of making an instance and a fork server of its
// own for one run (23-29 ms of a `true` run went there). Like docker's
// /run/docker.sock it is root's: 0600, and every connection's peer is
// checked (SO_PEERCRED) on both sides.
//
// The protocol: one connection per run. The client writes one JSON object
// (controlRequest, at most maxControlRequest bytes) and reads one back
// (controlReply). Closing its write side (SIGINT) cancels the run, whose
// result (status cancelled) still comes back. A reply with Fallback set
// (busy, draining, another home) tells the client to run it itself.

// controlSocketName is the socket's name in the state dir; the lock file
// beside it (controlSocketName + ".lock") is held by the server serving
// it, so that two servers sharing a state dir never take each other's.
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
// it goes over the socket.
type controlRun struct {
	Language  string     `json:"language,omitempty"`
	Source    []byte     `json:"source,omitempty"`
	Args      []string   `json:"args,omitempty"`
	Env       []string   `json:"env,omitempty"`
	Stdin     []byte     `json:"stdin,omitempty"`
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
// by others, in a directory owned by one of owners and writable by no one
// else. It defends against a planted socket (socket squatting, CWE-283
// unverified ownership; CWE-59 link following): a user who could place or
// swap the socket would receive the programs and stdin sent to it and
// could forge their results (CI verdicts). The peer's own uid is checked
// once connected (checkPeer): the path checks keep the socket from being
// swapped between them.
func checkControlSocket(path string, owners []int) error {
	dir := filepath.Dir(path)
	if err := checkOwned(dir, owners, 0o022); err != nil {
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

// runOnServer sends run to the local server of the state dir, if one
// serves it and passes the checks, and returns its reply; nil when the
// run is to go standalone (no server, a refused socket: logged, a server
// that asks for it).
func runOnServer(ctx context.Context, log *slog.Logger, stateDir, home string, run controlRun) *controlReply {
	path := filepath.Join(stateDir, controlSocketName)
	c, err := dialControl(path)
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

// controlServer serves the control socket of a state dir.
type controlServer struct {
	path string
	lock *os.File
	ln   *net.UnixListener
	log  *slog.Logger
	wg   sync.WaitGroup
}

// listenControl takes the control socket of stateDir: it locks it (a
// second server sharing the state dir serves none: nil, nil and a
// warning), removes a dead server's socket and listens, 0600.
func listenControl(stateDir string, log *slog.Logger) (*controlServer, error) {
	if err := os.MkdirAll(stateDir, 0o711); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	path := filepath.Join(stateDir, controlSocketName)
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if lock == nil {
		log.Warn("another server serves this state dir's control socket: `sandcell run` goes there, not here", "socket", path)
		return nil, nil
	}
	// What is there is a dead server's (the lock is ours): a socket, or
	// nothing. Anything else is left for the operator to look at.
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != os.ModeSocket {
			lock.Close()
			return nil, fmt.Errorf("control socket %s: a %s is in its place", path, st.Mode().Type())
		}
		if err := os.Remove(path); err != nil {
			lock.Close()
			return nil, fmt.Errorf("control socket %s: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// Bound with the umask's mode for a moment: every connection's peer
	// is checked (serve), so one made before the chmod is refused all
	// the same unless it is root's.
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		lock.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &controlServer{path: path, lock: lock, ln: ln, log: log}, nil
}

// lockFile takes an exclusive flock on path without waiting: nil, nil
// when another process holds it.
func lockFile(path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, nil
			}
			return nil, fmt.Errorf("flock %s: %w", path, err)
		}
		// The holder removes the file as it unlocks (close): the lock
		// counts only if path still names the file locked.
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) == nil && unix.Stat(path, &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev {
			return f, nil
		}
		f.Close()
	}
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

// Close stops listening, removes the socket, waits for the connections
// in flight and lets go of the lock (removing its file first).
func (s *controlServer) Close() {
	s.ln.Close()
	s.wg.Wait()
	os.Remove(s.lock.Name())
	s.lock.Close()
}
