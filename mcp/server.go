package mcp

import (
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync"
)

// Options configure a Server. The zero value of every field is usable.
type Options struct {
	// Name, Title and Version are the serverInfo (default name "sandcell").
	Name, Title, Version string
	// Instructions tell the model how to use the server (optional).
	Instructions string
	// Logger receives the server's own logs (never protocol traffic). Nil
	// discards them.
	Logger *slog.Logger
	// MaxMessageBytes caps one incoming message (0: DefaultMaxMessageBytes).
	MaxMessageBytes int
	// MaxInFlight caps the concurrent tool calls of one session (0: 64).
	// More are answered with an error instead of queueing unboundedly.
	MaxInFlight int
	// PageSize is the number of items per list page (0: 100).
	PageSize int
	// ListTTLMs is the ttlMs of stateless-era list results (0: 0, no caching).
	ListTTLMs int
}

// Server is the protocol layer: a dispatch table over registered tools,
// resources and prompts. It is transport-agnostic: ServeStream, ServeTCP and
// HTTPHandler connect it to clients. Safe for concurrent use.
type Server struct {
	opts Options
	log  *slog.Logger

	mu        sync.Mutex
	tools     []*registeredTool // in registration order
	resources []*registeredResource
	templates []*registeredTemplate
	prompts   []*registeredPrompt
	completer CompletionHandler
	sessions  map[*Session]bool
	listers   []ResourceLister

	sandboxes sandboxIndex // the sandbox sessions each protocol session used
	confirms  *confirmer   // destructive tools' confirmation tokens
	random    io.Reader    // fence tags (crypto/rand; tests make it deterministic)
	runCell   runCellTool  // run_cell's parts (addKernelTools), for the live profile's
}

// NewServer makes a server. opts may be nil.
func NewServer(opts *Options) *Server {
	s := &Server{sessions: map[*Session]bool{}, confirms: newConfirmer(), random: rand.Reader}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Name == "" {
		s.opts.Name = "sandcell"
	}
	if s.opts.Version == "" {
		s.opts.Version = "dev"
	}
	if s.opts.MaxMessageBytes <= 0 {
		s.opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if s.opts.MaxInFlight <= 0 {
		s.opts.MaxInFlight = 64
	}
	if s.opts.PageSize <= 0 {
		s.opts.PageSize = 100
	}
	s.log = s.opts.Logger
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return s
}

func (s *Server) info() Implementation {
	return Implementation{Name: s.opts.Name, Title: s.opts.Title, Version: s.opts.Version}
}

func (s *Server) capabilities() serverCapabilities {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := serverCapabilities{
		Tools:     &listChangedCap{ListChanged: true},
		Resources: &resourcesCap{Subscribe: true, ListChanged: true},
		Logging:   &struct{}{},
	}
	if len(s.prompts) > 0 {
		c.Prompts = &listChangedCap{ListChanged: true}
	}
	if s.completer != nil {
		c.Completions = &struct{}{}
	}
	return c
}

func (s *Server) addSession(ss *Session) {
	s.mu.Lock()
	s.sessions[ss] = true
	s.mu.Unlock()
}

func (s *Server) removeSession(ss *Session) {
	s.mu.Lock()
	delete(s.sessions, ss)
	s.mu.Unlock()
	s.sandboxes.drop(ss)
}

// broadcast sends a notification to every initialized handshake-era
// session (stateless clients re-fetch by ttlMs instead).
func (s *Server) broadcast(method string, params any, filter func(*Session) bool) {
	s.mu.Lock()
	list := make([]*Session, 0, len(s.sessions))
	for ss := range s.sessions {
		list = append(list, ss)
	}
	s.mu.Unlock()
	for _, ss := range list {
		if filter == nil || filter(ss) {
			ss.Notify(method, params)
		}
	}
}

// ResourceUpdated tells the sessions subscribed to uri that it changed
// (notifications/resources/updated).
func (s *Server) ResourceUpdated(uri string) {
	s.broadcast("notifications/resources/updated", map[string]string{"uri": uri}, func(ss *Session) bool {
		return ss.subscribed(uri)
	})
}

// paginate returns one page of items after cursor and the next cursor. A
// cursor is opaque to clients: the index of the next item, encoded.
func paginate[T any](items []T, cursor *string, size int) ([]T, string, error) {
	start := 0
	if cursor != nil {
		n, ok := decodeCursor(*cursor)
		if !ok || n > len(items) {
			return nil, "", errorf(CodeInvalidParams, "invalid cursor %q: pass back a nextCursor from a previous list result, or none", truncate(*cursor, 64))
		}
		start = n
	}
	end := min(start+size, len(items))
	next := ""
	if end < len(items) {
		next = encodeCursor(end)
	}
	return slices.Clone(items[start:end]), next, nil
}

// cursors are "c" + decimal offset, wrapped in JSON-safe text.
func encodeCursor(n int) string { b, _ := json.Marshal(n); return "c" + string(b) }

func decodeCursor(s string) (int, bool) {
	if len(s) < 2 || s[0] != 'c' {
		return 0, false
	}
	var n int
	if err := json.Unmarshal([]byte(s[1:]), &n); err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
