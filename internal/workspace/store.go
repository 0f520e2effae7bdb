package workspace

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/sandcell/sandcell/internal/owner"
)

// Defaults for the zero values of Options.
const (
	DefaultQuota        = 256 << 20
	DefaultTTL          = 24 * time.Hour
	DefaultMaxTTL       = 7 * 24 * time.Hour
	DefaultMaxEntries   = 100000
	DefaultMaxSessions  = 256
	DefaultMaxPerClient = 32
)

// Names inside the store. Only names starting with one of the temporary
// prefixes are ever removed by the crash recovery in Open.
const (
	filesDir     = "files"      // <id>/files: the tree, owned by Options.UID/GID
	metaFile     = "meta.json"  // <id>/meta.json
	newTreeTmp   = "files.new-" // <id>/files.new-*: a tree being built, or the old one after the swap
	metaTmp      = "meta.json.tmp-"
	createTmp    = ".create-" // <dir>/.create-<id>-*: a session being created
	removeTmp    = ".remove-" // <dir>/.remove-<id>-*: a session being deleted
	maxMetaBytes = 64 << 10
	maxLanguage  = 64
)

// Options configure a Store. The zero value of each field is usable.
type Options struct {
	// UID and GID own every file and directory in a workspace tree: the
	// sandbox user as seen from the host (its uid mapped through the user
	// namespace, e.g. 101000). Zero is root.
	UID, GID int

	// Quota is a new session's quota in bytes, counted as a tmpfs /work
	// of that size would charge the tree (see the package doc). Zero:
	// DefaultQuota.
	Quota int64

	// TTL is a new session's default idle expiry. Zero: DefaultTTL.
	// MaxTTL is the longest a client may ask for (a longer one is
	// clamped to it). Zero: DefaultMaxTTL; TTL must not be longer.
	TTL    time.Duration
	MaxTTL time.Duration

	// MaxSessions caps the sessions of the store, MaxPerClient those that
	// one client (CreateFor's client) made and that live. Together with
	// Quota they bound the host disk the store can take: MaxSessions x
	// Quota bytes, MaxSessions x Quota/4 KiB inodes. Zero:
	// DefaultMaxSessions, DefaultMaxPerClient.
	MaxSessions  int
	MaxPerClient int

	// MaxEntries caps the entries of a workspace tree: Save refuses a
	// /work holding more, Write refuses a file beyond it. Zero:
	// DefaultMaxEntries.
	MaxEntries int

	// Logger receives the store's events (sessions created, removed,
	// expired, leftovers cleaned up). Nil: discard.
	Logger *slog.Logger

	// Now is the clock, for tests. Nil: time.Now.
	Now func() time.Time
}

// Meta describes a session; it is persisted as <id>/meta.json.
type Meta struct {
	ID       string `json:"id"`
	Language string `json:"language,omitempty"`
	// Image is the imported image the session's runs get as their root
	// when they name none (create_session's image).
	Image    string        `json:"image,omitempty"`
	Created  time.Time     `json:"created"`
	LastUsed time.Time     `json:"last_used"`
	TTL      time.Duration `json:"ttl"`   // idle expiry, in nanoseconds
	Quota    int64         `json:"quota"` // bytes
	// Deps are the dependency sets installed for the session's runs
	// (install_dependencies with its id), by language name: normalised
	// requirements, kept here so that they survive a restart.
	Deps map[string][]string `json:"deps,omitempty"`
	// Kernels are the session's kernels by language: "" while one is
	// live, else why the last one ended. Kept here so that a server
	// started again can say why a kernel's state was lost: one still
	// live on record ended with the server before it (issue #37).
	Kernels map[string]string `json:"kernels,omitempty"`
}

// expired reports whether m has been idle for longer than its TTL at now.
func (m *Meta) expired(now time.Time) bool { return now.Sub(m.LastUsed) > m.TTL }

// Store is the on-disk store of session workspaces. It is safe for
// concurrent use. One process at a time may use a directory: session
// locks live in memory.
//
// Layout (everything above a files tree is root's, mode 0700):
//
//	<dir>/<id>/meta.json        the session's Meta, replaced atomically
//	<dir>/<id>/files/           the workspace tree (/work), owned by UID/GID
//	<dir>/<id>/files.new-*      a tree being saved (removed by Open after a crash)
//	<dir>/.create-*, .remove-*  a session being created or removed (same)
type Store struct {
	dir  string
	opts Options
	log  *slog.Logger
	now  func() time.Time

	mu     sync.Mutex        // guards states and clients
	states map[string]*state // sessions handed out by Get
	// clients maps a client (CreateFor) to the ids it created in this
	// process; ids that are gone are dropped when the client is counted.
	clients map[string]map[string]bool

	createMu sync.Mutex // one Create at a time: the session count holds
}

// state is what the Sessions of one id share.
type state struct {
	lock chan struct{} // holds a token while the session is locked

	mu      sync.Mutex // guards the fields below, and meta.json updates
	holder  *Session   // the Session whose Lock holds lock, if any
	removed bool       // Remove or Expire deleted the session, or Remove will at unlock
	discard bool       // Remove came while locked: the unlock deletes the files
}

// Open opens the store at dir, creating it (mode 0700) if needed. It
// recovers from a crash: it removes temporary trees and files left by an
// interrupted Create, Remove, Save, Reset or meta.json update (each of
// which leaves the old state or the new one whole, never a mix), then
// removes the sessions idle for longer than their TTL.
func Open(dir string, opts Options) (*Store, error) {
	switch {
	case opts.UID < 0 || opts.GID < 0:
		return nil, fmt.Errorf("%w: workspace owner %d:%d is negative", ErrInvalid, opts.UID, opts.GID)
	case opts.Quota < 0:
		return nil, fmt.Errorf("%w: workspace quota %d is negative", ErrInvalid, opts.Quota)
	case opts.TTL < 0:
		return nil, fmt.Errorf("%w: workspace TTL %v is negative", ErrInvalid, opts.TTL)
	case opts.MaxEntries < 0:
		return nil, fmt.Errorf("%w: workspace entry cap %d is negative", ErrInvalid, opts.MaxEntries)
	case opts.MaxTTL < 0 || opts.MaxSessions < 0 || opts.MaxPerClient < 0:
		return nil, fmt.Errorf("%w: negative session bound (max TTL %v, max sessions %d, per client %d)", ErrInvalid, opts.MaxTTL, opts.MaxSessions, opts.MaxPerClient)
	}
	if opts.Quota == 0 {
		opts.Quota = DefaultQuota
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.MaxEntries == 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.MaxTTL == 0 {
		opts.MaxTTL = max(DefaultMaxTTL, opts.TTL)
	}
	if opts.TTL > opts.MaxTTL {
		return nil, fmt.Errorf("%w: session TTL %v is longer than the maximum %v", ErrInvalid, opts.TTL, opts.MaxTTL)
	}
	if opts.MaxSessions == 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.MaxPerClient == 0 {
		opts.MaxPerClient = DefaultMaxPerClient
	}
	s := &Store{opts: opts, log: opts.Logger, now: opts.Now, states: map[string]*state{}, clients: map[string]map[string]bool{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace store %s: %w", dir, err)
	}
	s.dir = abs
	// Only the server reads the store: a files tree belongs to the
	// sandbox user, and the 0700 root-owned directories above it keep
	// that user's host processes (if any) out of it.
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("workspace store: %w", err)
	}
	if err := os.Chmod(abs, 0o700); err != nil {
		return nil, fmt.Errorf("workspace store: %w", err)
	}
	if err := s.recover(); err != nil {
		return nil, err
	}
	if _, err := s.Expire(); err != nil {
		s.log.Warn("workspace expiry failed", "error", err)
	}
	return s, nil
}

// Dir returns the store's directory (absolute).
func (s *Store) Dir() string { return s.dir }

// openStore opens the store directory; every other open is beneath it.
// Its errors do not name the directory: they may reach clients.
func (s *Store) openStore() (int, error) {
	fd, err := unix.Open(s.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the workspace store: %w", err)
	}
	return fd, nil
}

// recover removes what an interrupted operation left behind.
func (s *Store) recover() error {
	fd, err := s.openStore()
	if err != nil {
		return fmt.Errorf("workspace store %s: %w", s.dir, err)
	}
	defer unix.Close(fd)
	names, err := readNames(fd, -1)
	if err != nil {
		return fmt.Errorf("workspace store %s: %w", s.dir, err)
	}
	for _, name := range names {
		switch {
		case strings.HasPrefix(name, createTmp), strings.HasPrefix(name, removeTmp):
			s.removeLeftover(fd, name, name)
		case validID(name):
			sess, err := openDir(fd, name)
			if err != nil {
				s.log.Warn("workspace session unreadable", "session_id", name, "error", err)
				continue
			}
			inner, err := readNames(sess, -1)
			if err != nil {
				s.log.Warn("workspace session unreadable", "session_id", name, "error", err)
			}
			for _, n := range inner {
				if strings.HasPrefix(n, newTreeTmp) || strings.HasPrefix(n, metaTmp) {
					s.removeLeftover(sess, n, name+"/"+n)
				}
			}
			unix.Close(sess)
		}
	}
	return nil
}

func (s *Store) removeLeftover(dirfd int, name, what string) {
	if tempOwnerLives(name) {
		// Another server on this store is in the middle of it.
		s.log.Debug("workspace temporary of a live process left alone", "path", what)
		return
	}
	if err := removeAt(dirfd, name); err != nil {
		s.log.Warn("workspace leftover not removed", "path", what, "error", err)
		return
	}
	s.log.Info("workspace leftover removed", "path", what)
}

// newID returns a session id: "s-" and 26 base32 characters, 128 random
// bits, so ids cannot be guessed.
func newID() string { return "s-" + strings.ToLower(rand.Text()) }

// validID reports whether id has newID's form. Every id from a client is
// checked before it names anything on disk.
func validID(id string) bool {
	if len(id) != 28 || !strings.HasPrefix(id, "s-") {
		return false
	}
	for _, c := range id[2:] {
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

func checkID(id string) error {
	if !validID(id) {
		return fmt.Errorf("%w: %s is not a session id", ErrInvalid, short(id))
	}
	return nil
}

// tmpName returns prefix followed by a random suffix.
// The suffix names this process (internal/owner) before the random part:
// "files.new-4242.98765.4026531836_k3xq...". Two servers may share a
// sessions directory (two stdio servers of one user, a server and its
// restart); Open removes a temporary only if its maker is provably dead
// (issue #17: each start removed the other's saves in flight).
func tmpName(prefix string) string {
	tok := "0"
	if t, err := owner.Self(); err == nil {
		tok = t.String()
	}
	return prefix + tok + "_" + strings.ToLower(rand.Text()[:10])
}

// tempOwnerLives reports whether the temporary name was made by a
// process that is (or may be) alive: its token (tmpName) does not prove
// it dead. A name without a token (an older sandcell's) has no owner to
// wait for.
func tempOwnerLives(name string) bool {
	suffix := name[strings.LastIndexByte(name, '-')+1:]
	tok, _, found := strings.Cut(suffix, "_")
	if !found {
		return false
	}
	t, ok := owner.Parse(tok)
	return ok && !t.Dead()
}

// Create creates a session with an empty workspace. language is recorded
// as given (a short label); ttl is its idle expiry, 0 for the store's
// default, and at most Options.MaxTTL (a longer one is clamped: Meta.TTL
// says what the session got). It fails with ErrTooMany when the store
// holds Options.MaxSessions sessions (after removing the expired ones).
func (s *Store) Create(language string, ttl time.Duration) (Meta, error) {
	return s.CreateFor("", language, "", ttl)
}

// CreateFor is Create for a client, of a session whose runs are in the
// imported image (Meta.Image; "": none). client is a name for whoever
// asks (an MCP connection), of which at most Options.MaxPerClient
// sessions may live at once; "" is no one in particular (only the store's
// cap applies).
func (s *Store) CreateFor(client, language, image string, ttl time.Duration) (Meta, error) {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if err := s.admit(client); err != nil {
		return Meta{}, err
	}
	m, err := s.create(language, image, ttl)
	if err == nil && client != "" {
		s.mu.Lock()
		if s.clients[client] == nil {
			s.clients[client] = map[string]bool{}
		}
		s.clients[client][m.ID] = true
		s.mu.Unlock()
	}
	return m, err
}

// admit refuses a new session past the store's cap or the client's.
//
// Preconditions: s.createMu is held.
func (s *Store) admit(client string) error {
	if client != "" {
		n := s.liveOf(client)
		if n >= s.opts.MaxPerClient {
			return fmt.Errorf("%w: this client has %d sessions, the most one client may have at once: close one (close_session) first", ErrTooMany, n)
		}
	}
	n, err := s.count()
	if err == nil && n >= s.opts.MaxSessions {
		if _, err := s.Expire(); err != nil {
			s.log.Warn("workspace expiry failed", "error", err)
		}
		n, err = s.count()
	}
	if err != nil {
		return err
	}
	if n >= s.opts.MaxSessions {
		return fmt.Errorf("%w: the server holds %d sessions, its most: close one (close_session) or wait until idle ones expire", ErrTooMany, n)
	}
	return nil
}

// count is the number of sessions in the store.
func (s *Store) count() (int, error) {
	fd, err := s.openStore()
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	names, err := readNames(fd, -1)
	if err != nil {
		return 0, fmt.Errorf("workspace store: %w", err)
	}
	n := 0
	for _, name := range names {
		if validID(name) && !s.removing(name) {
			n++
		}
	}
	return n, nil
}

// liveOf counts the sessions of client that still exist, forgetting the
// others.
func (s *Store) liveOf(client string) int {
	s.mu.Lock()
	ids := slices.Collect(maps.Keys(s.clients[client]))
	s.mu.Unlock()
	live := 0
	for _, id := range ids {
		var st unix.Stat_t
		if unix.Stat(filepath.Join(s.dir, id), &st) == nil && !s.removing(id) {
			live++
			continue
		}
		s.mu.Lock()
		delete(s.clients[client], id)
		if len(s.clients[client]) == 0 {
			delete(s.clients, client)
		}
		s.mu.Unlock()
	}
	return live
}

func (s *Store) create(language, image string, ttl time.Duration) (Meta, error) {
	if badName(image, 128) {
		return Meta{}, fmt.Errorf("%w: image %s", ErrInvalid, short(image))
	}
	if ttl < 0 {
		return Meta{}, fmt.Errorf("%w: session TTL %v is negative", ErrInvalid, ttl)
	}
	if badName(language, maxLanguage) {
		return Meta{}, fmt.Errorf("%w: language %s", ErrInvalid, short(language))
	}
	if ttl == 0 {
		ttl = s.opts.TTL
	}
	if ttl > s.opts.MaxTTL {
		s.log.Info("session TTL clamped to the maximum", "asked", ttl, "max", s.opts.MaxTTL)
		ttl = s.opts.MaxTTL
	}
	now := s.now().Round(0)
	m := Meta{ID: newID(), Language: language, Image: image, Created: now, LastUsed: now, TTL: ttl, Quota: s.opts.Quota}
	fd, err := s.openStore()
	if err != nil {
		return Meta{}, err
	}
	defer unix.Close(fd)
	// Built aside and renamed into place: a crash leaves no half session.
	tmp := tmpName(createTmp + m.ID + "-")
	if err := s.build(fd, tmp, &m); err != nil {
		if rerr := removeAt(fd, tmp); rerr != nil {
			s.log.Warn("workspace leftover not removed", "path", tmp, "error", rerr)
		}
		return Meta{}, fmt.Errorf("create session: %w", err)
	}
	s.log.Info("workspace session created", "session_id", m.ID, "language", language, "ttl", ttl)
	return m, nil
}

// badName reports whether a name kept in meta.json is longer than max or
// holds anything but graphic, non-space characters.
func badName(name string, max int) bool {
	return len(name) > max || strings.ContainsFunc(name, func(r rune) bool {
		return r == unicode.ReplacementChar || !unicode.IsGraphic(r) || unicode.IsSpace(r)
	})
}

func (s *Store) build(fd int, tmp string, m *Meta) error {
	if err := unix.Mkdirat(fd, tmp, 0o700); err != nil {
		return err
	}
	sess, err := openDir(fd, tmp)
	if err != nil {
		return err
	}
	defer unix.Close(sess)
	if err := unix.Fchmod(sess, 0o700); err != nil {
		return err
	}
	if err := writeMeta(sess, m); err != nil {
		return err
	}
	if err := s.emptyTree(sess, filesDir); err != nil {
		return err
	}
	return unix.Renameat2(fd, tmp, fd, m.ID, unix.RENAME_NOREPLACE)
}

// emptyTree creates name in the session directory sess as an empty
// workspace root: mode 0755, owned by the sandbox user, like a fresh
// tmpfs /work.
func (s *Store) emptyTree(sess int, name string) error {
	if err := unix.Mkdirat(sess, name, 0o700); err != nil {
		return err
	}
	fd, err := openDir(sess, name)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return finish(fd, s.opts.UID, s.opts.GID, 0o755)
}

// writeMeta replaces meta.json in the session directory sess atomically:
// a synced temporary file renamed over it.
func writeMeta(sess int, m *Meta) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := tmpName(metaTmp)
	fd, err := openBeneath(sess, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", metaFile, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, werr := f.Write(append(data, '\n'))
	serr := f.Sync()
	if err := errors.Join(werr, serr, f.Close()); err != nil {
		unix.Unlinkat(sess, tmp, 0)
		return fmt.Errorf("write %s: %w", metaFile, err)
	}
	if err := unix.Renameat(sess, tmp, sess, metaFile); err != nil {
		unix.Unlinkat(sess, tmp, 0)
		return fmt.Errorf("write %s: %w", metaFile, err)
	}
	return nil
}

// readMeta reads the Meta of session id from its directory sess.
func readMeta(sess int, id string) (Meta, error) {
	fd, err := openBeneath(sess, metaFile, unix.O_RDONLY, 0)
	if err == unix.ENOENT {
		return Meta{}, fmt.Errorf("%w: session %s has no %s", ErrNotFound, id, metaFile)
	}
	if err != nil {
		return Meta{}, fmt.Errorf("session %s: read %s: %w", id, metaFile, err)
	}
	f := os.NewFile(uintptr(fd), metaFile)
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxMetaBytes))
	if err != nil {
		return Meta{}, fmt.Errorf("session %s: read %s: %w", id, metaFile, err)
	}
	var m Meta
	if err := json.Unmarshal(data, &m); err != nil {
		return Meta{}, fmt.Errorf("session %s: %s: %w", id, metaFile, err)
	}
	if m.ID != id {
		return Meta{}, fmt.Errorf("session %s: %s names session %s", id, metaFile, short(m.ID))
	}
	return m, nil
}

// Get returns the session id and marks it used now (LastUsed, persisted).
// A malformed id is ErrInvalid; an unknown or expired one ErrNotFound.
func (s *Store) Get(id string) (*Session, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	fd, err := s.openStore()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	st, err := s.state(fd, id)
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.removed {
		return nil, fmt.Errorf("%w: session %s", ErrNotFound, id)
	}
	sess, err := openDir(fd, id)
	if err == unix.ENOENT {
		return nil, fmt.Errorf("%w: session %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", id, err)
	}
	defer unix.Close(sess)
	m, err := readMeta(sess, id)
	if err != nil {
		return nil, err
	}
	now := s.now().Round(0)
	if m.expired(now) {
		return nil, fmt.Errorf("%w: session %s expired (idle since %s)", ErrNotFound, id, m.LastUsed.Format(time.RFC3339))
	}
	// LastUsed is persisted (a synced write) at most about once a second
	// (a sixteenth of the TTL if that is less): a session used many times
	// a second (a kernel's cells) must not pay a disk sync for each use,
	// and its expiry moves by that much at most.
	if now.Sub(m.LastUsed) >= min(time.Second, m.TTL/16) {
		m.LastUsed = now
		if err := writeMeta(sess, &m); err != nil {
			return nil, fmt.Errorf("session %s: %w", id, err)
		}
	}
	m.LastUsed = now
	return &Session{meta: m, store: s, st: st}, nil
}

// SetDeps records reqs as the session's dependency set for language (nil
// or empty: none) in its meta.json.
//
// Preconditions: the caller holds the session's Lock.
func (ss *Session) SetDeps(language string, reqs []string) error {
	if err := ss.locked(); err != nil {
		return err
	}
	m, err := ss.updateMeta(func(m *Meta) {
		if m.Deps == nil {
			m.Deps = map[string][]string{}
		}
		if len(reqs) == 0 {
			delete(m.Deps, language)
		} else {
			m.Deps[language] = slices.Clone(reqs)
		}
	})
	if err != nil {
		return err
	}
	ss.meta.Deps = m.Deps
	return nil
}

// SetKernel records in the session's meta.json that its kernel of
// language is live (ended ""), or why it ended (Meta.Kernels). It needs
// no Lock (a kernel ends between calls too, when it is stopped idle or
// with the server) and changes the Meta of the Sessions that Get returns
// later, not ss's.
func (ss *Session) SetKernel(language, ended string) error {
	_, err := ss.updateMeta(func(m *Meta) {
		if m.Kernels == nil {
			m.Kernels = map[string]string{}
		}
		m.Kernels[language] = ended
	})
	return err
}

// updateMeta applies change to the session's meta.json (read, changed and
// replaced under the state's mutex, as Get's LastUsed) and returns the
// result.
func (ss *Session) updateMeta(change func(*Meta)) (Meta, error) {
	fd, err := ss.store.openStore()
	if err != nil {
		return Meta{}, err
	}
	defer unix.Close(fd)
	ss.st.mu.Lock()
	defer ss.st.mu.Unlock()
	id := ss.meta.ID
	if ss.st.removed {
		return Meta{}, fmt.Errorf("%w: session %s was removed", ErrNotFound, id)
	}
	sess, err := openDir(fd, id)
	if err == unix.ENOENT {
		return Meta{}, fmt.Errorf("%w: session %s", ErrNotFound, id)
	}
	if err != nil {
		return Meta{}, fmt.Errorf("session %s: %w", id, err)
	}
	defer unix.Close(sess)
	m, err := readMeta(sess, id)
	if err != nil {
		return Meta{}, err
	}
	change(&m)
	if err := writeMeta(sess, &m); err != nil {
		return Meta{}, fmt.Errorf("session %s: %w", id, err)
	}
	return m, nil
}

// state returns the shared state of session id, creating it if the
// session exists (so ids that name nothing cost no memory).
func (s *Store) state(fd int, id string) (*state, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.states[id]; st != nil {
		return st, nil
	}
	var sb unix.Stat_t
	if err := unix.Fstatat(fd, id, &sb, unix.AT_SYMLINK_NOFOLLOW); err != nil || !isDir(&sb) {
		return nil, fmt.Errorf("%w: session %s", ErrNotFound, id)
	}
	st := &state{lock: make(chan struct{}, 1)}
	s.states[id] = st
	return st, nil
}

// List returns the sessions that have not expired, oldest first. A
// session whose meta.json cannot be read is logged and left out.
func (s *Store) List() ([]Meta, error) {
	fd, err := s.openStore()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	names, err := readNames(fd, -1)
	if err != nil {
		return nil, fmt.Errorf("workspace store: %w", err)
	}
	now := s.now()
	var out []Meta
	for _, id := range names {
		if !validID(id) || s.removing(id) {
			continue
		}
		m, err := s.meta(fd, id)
		if err != nil {
			s.log.Warn("workspace session unreadable", "session_id", id, "error", err)
			continue
		}
		if !m.expired(now) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Meta) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// removing reports whether Remove was called on the locked session id,
// whose files stay until its unlock.
func (s *Store) removing(id string) bool {
	s.mu.Lock()
	st := s.states[id]
	s.mu.Unlock()
	if st == nil {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.removed
}

func (s *Store) meta(fd int, id string) (Meta, error) {
	sess, err := openDir(fd, id)
	if err == unix.ENOENT {
		return Meta{}, fmt.Errorf("%w: session %s", ErrNotFound, id)
	}
	if err != nil {
		return Meta{}, fmt.Errorf("session %s: %w", id, err)
	}
	defer unix.Close(sess)
	return readMeta(sess, id)
}

// Remove deletes session id and its files; ErrNotFound if there is no
// such session. If the session is locked (a run or a write in progress,
// or the caller's own Lock), it is gone at once for Get, Lock and List,
// its holder's further changes (Save included) fail with ErrNotFound, and
// its files are deleted when the lock is released.
func (s *Store) Remove(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := s.remove(id, nil)
	return err
}

// Expire removes the sessions idle for longer than their TTL, except
// those locked right now, and returns their ids. Open calls it; a server
// calls it periodically.
func (s *Store) Expire() ([]string, error) {
	fd, err := s.openStore()
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	names, err := readNames(fd, -1)
	if err != nil {
		return nil, fmt.Errorf("workspace store: %w", err)
	}
	var ids []string
	var errs []error
	for _, id := range names {
		if !validID(id) {
			continue
		}
		ok, err := s.remove(id, func(m *Meta) bool { return m.expired(s.now()) })
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			errs = append(errs, err)
		case ok:
			ids = append(ids, id)
		}
	}
	return ids, errors.Join(errs...)
}

// remove deletes session id if cond is nil or holds for its Meta, and
// reports whether it did. The session is first renamed aside (atomically
// gone for Get, List and Lock), then its files removed. cond (Expire)
// never holds for a locked session; Remove (cond nil) of a locked one
// marks it removed and leaves the deletion to its unlock.
func (s *Store) remove(id string, cond func(*Meta) bool) (bool, error) {
	fd, err := s.openStore()
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	trash, deferred, err := s.detach(fd, id, cond)
	if err != nil || (trash == "" && !deferred) {
		return false, err
	}
	switch {
	case deferred:
		s.log.Info("workspace session removed (its files when unlocked)", "session_id", id)
		return true, nil
	case cond != nil:
		s.log.Info("workspace session expired", "session_id", id)
	default:
		s.log.Info("workspace session removed", "session_id", id)
	}
	s.removeTrash(fd, trash)
	return true, nil
}

// detach renames session id aside under the store's lock and returns the
// new name; "" if cond said no. If the session is locked, it returns ""
// and, for Remove (cond nil), marks it for deletion at unlock (deferred).
func (s *Store) detach(fd int, id string, cond func(*Meta) bool) (trash string, deferred bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.states[id]
	if st != nil {
		select {
		case st.lock <- struct{}{}:
			defer func() { <-st.lock }()
		default:
			if cond != nil {
				return "", false, nil // in use, so not idle
			}
			st.mu.Lock()
			defer st.mu.Unlock()
			if st.removed {
				return "", false, fmt.Errorf("%w: session %s", ErrNotFound, id)
			}
			st.removed, st.discard = true, true
			return "", true, nil
		}
		// Held until renamed: Get must not mark it used in between.
		st.mu.Lock()
		defer st.mu.Unlock()
	}
	if cond != nil {
		m, err := s.meta(fd, id)
		if err != nil {
			return "", false, err
		}
		if !cond(&m) {
			return "", false, nil
		}
	}
	trash, err = s.renameAside(fd, id)
	if err == nil && st != nil {
		st.removed = true
	}
	return trash, false, err
}

// renameAside renames session id to a temporary name (which Open removes
// after a crash), forgets its state and returns the name.
//
// Preconditions: s.mu is held, and the session's lock and state.mu if it
// has a state (no one else can be using the session).
func (s *Store) renameAside(fd int, id string) (string, error) {
	trash := tmpName(removeTmp + id + "-")
	if err := unix.Renameat2(fd, id, fd, trash, unix.RENAME_NOREPLACE); err != nil {
		if err == unix.ENOENT {
			return "", fmt.Errorf("%w: session %s", ErrNotFound, id)
		}
		return "", fmt.Errorf("remove session %s: %w", id, err)
	}
	delete(s.states, id)
	return trash, nil
}

// removeTrash removes a session renamed aside; a failure is only logged:
// the session is gone for clients already, and Open retries.
func (s *Store) removeTrash(fd int, trash string) {
	if err := removeAt(fd, trash); err != nil {
		s.log.Warn("workspace leftover not removed", "path", trash, "error", err)
	}
}

// discard deletes session id, which Remove marked while it was locked.
//
// Preconditions: the caller holds st's lock.
func (s *Store) discard(id string, st *state) {
	fd, err := s.openStore()
	if err != nil {
		s.log.Warn("workspace session not removed", "session_id", id, "error", err)
		return
	}
	defer unix.Close(fd)
	s.mu.Lock()
	st.mu.Lock()
	trash, err := s.renameAside(fd, id)
	st.mu.Unlock()
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("workspace session not removed", "session_id", id, "error", err)
		return
	}
	s.log.Info("workspace session removed", "session_id", id)
	s.removeTrash(fd, trash)
}
