package e2b

import (
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandcell/sandcell/api"
)

// entryInfo is filesystem.EntryInfo in ProtoJSON.
type entryInfo struct {
	Name          string  `json:"name"`
	Type          string  `json:"type"`
	Path          string  `json:"path"`
	Size          string  `json:"size"` // int64: a string in ProtoJSON
	Mode          uint32  `json:"mode"`
	Permissions   string  `json:"permissions"`
	Owner         string  `json:"owner"`
	Group         string  `json:"group"`
	ModifiedTime  string  `json:"modifiedTime,omitempty"`
	SymlinkTarget *string `json:"symlinkTarget,omitempty"`
}

func entryOf(f api.FileInfo) entryInfo {
	e := entryInfo{Name: f.Name, Path: f.Path, Size: strconv.FormatInt(f.Size, 10), Mode: f.Mode, Owner: f.Owner, Group: f.Group}
	mode := fs.FileMode(f.Mode & 0o777)
	switch f.Type {
	case "dir":
		e.Type, mode = "FILE_TYPE_DIRECTORY", mode|fs.ModeDir
	case "symlink":
		e.Type, mode = "FILE_TYPE_SYMLINK", mode|fs.ModeSymlink
		// envd gives the target as a path, a relative link's resolved
		// against the link's directory.
		t := f.Target
		if t != "" && !path.IsAbs(t) {
			t = path.Join(path.Dir(f.Path), t)
		}
		e.SymlinkTarget = &t
	default:
		e.Type = "FILE_TYPE_FILE"
	}
	e.Permissions = mode.String()
	if !f.ModTime.IsZero() {
		e.ModifiedTime = f.ModTime.UTC().Format(time.RFC3339Nano)
	}
	return e
}

type pathRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

type moveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

type watchRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
	// IncludeEntry and AllowNetworkMounts need envd 0.6.3 / 0.6.4: the
	// SDK does not send them to the EnvdVersion reported here.
}

type watcherRequest struct {
	WatcherID string `json:"watcherId"`
}

// UnmarshalJSON takes the proto field name too (watcher_id): ProtoJSON
// parsers accept both, and a client may send either.
func (w *watcherRequest) UnmarshalJSON(b []byte) error {
	var m struct {
		Camel string `json:"watcherId"`
		Proto string `json:"watcher_id"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	w.WatcherID = cmp.Or(m.Camel, m.Proto)
	return nil
}

type entryResponse struct {
	Entry entryInfo `json:"entry"`
}

type entriesResponse struct {
	Entries []entryInfo `json:"entries"`
}

func (h *Handler) filesystemRPC(w http.ResponseWriter, r *http.Request, id, method string) {
	// A relative path is the user's home's, as envd resolves it: root's
	// is /root (the service resolves the default user's).
	user, _ := userOf(r)
	home := func(p string) string { return homePath(user, p) }
	switch method {
	case "Stat":
		unary(w, r, func(ctx context.Context, req *pathRequest) (*entryResponse, error) {
			f, err := h.sb.Stat(ctx, id, home(req.Path))
			if err != nil {
				return nil, err
			}
			return &entryResponse{entryOf(f)}, nil
		})
	case "MakeDir":
		unary(w, r, func(ctx context.Context, req *pathRequest) (*entryResponse, error) {
			created, err := h.sb.MakeDir(ctx, id, home(req.Path))
			if err != nil {
				return nil, err
			}
			if !created {
				// The SDK reads already_exists as make_dir's false.
				return nil, rpcErr("already_exists", "directory %s already exists", req.Path)
			}
			f, err := h.sb.Stat(ctx, id, home(req.Path))
			if err != nil {
				return nil, err
			}
			return &entryResponse{entryOf(f)}, nil
		})
	case "Move":
		unary(w, r, func(ctx context.Context, req *moveRequest) (*entryResponse, error) {
			f, err := h.sb.Move(ctx, id, home(req.Source), home(req.Destination))
			if err != nil {
				return nil, err
			}
			return &entryResponse{entryOf(f)}, nil
		})
	case "ListDir":
		unary(w, r, func(ctx context.Context, req *pathRequest) (*entriesResponse, error) {
			fs, err := h.sb.ListDir(ctx, id, home(req.Path), int(max(req.Depth, 1)))
			if err != nil {
				return nil, err
			}
			out := &entriesResponse{Entries: make([]entryInfo, 0, len(fs))}
			for _, f := range fs {
				out.Entries = append(out.Entries, entryOf(f))
			}
			return out, nil
		})
	case "Remove":
		unary(w, r, func(ctx context.Context, req *pathRequest) (*empty, error) {
			// envd removes as os.RemoveAll does: nothing there is done
			// (E2B's test "remove non-existing file" expects no error).
			// ServeHTTP found the sandbox, so not found is the path.
			if err := h.sb.Remove(ctx, id, home(req.Path)); err != nil && !errors.Is(err, api.ErrNotFound) {
				return nil, err
			}
			return &empty{}, nil
		})
	case "WatchDir":
		serveStream(w, r, func(ctx context.Context, s *stream, req *watchRequest) { h.watchDir(ctx, r, s, id, req) })
	case "CreateWatcher":
		unary(w, r, func(ctx context.Context, req *watchRequest) (*watcherRequest, error) {
			wid, err := h.createWatcher(ctx, id, req)
			return &watcherRequest{WatcherID: wid}, err
		})
	case "GetWatcherEvents":
		unary(w, r, func(ctx context.Context, req *watcherRequest) (*watcherEvents, error) {
			evs, err := h.watcherEvents(ctx, id, req.WatcherID)
			return &watcherEvents{Events: evs}, err
		})
	case "RemoveWatcher":
		unary(w, r, func(ctx context.Context, req *watcherRequest) (*empty, error) {
			return &empty{}, h.removeWatcher(id, req.WatcherID)
		})
	default:
		writeRPCError(w, rpcErr("unimplemented", "filesystem.Filesystem/%s is not a method of envd", method))
	}
}

// files serves envd's /files: GET downloads a file's bytes, POST uploads
// (multipart parts named "file", the part's filename the path when the
// query names none; or application/octet-stream, gzip allowed, to the
// query's path) and answers with the entries written.
func (h *Handler) files(w http.ResponseWriter, r *http.Request, id string) {
	user, err := userOf(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, err.(*rpcError).Message)
		return
	}
	p := homePath(user, r.URL.Query().Get("path"))
	switch r.Method {
	case http.MethodGet:
		if p == "" {
			writeError(w, http.StatusBadRequest, "path: missing")
			return
		}
		b, err := h.sb.ReadFile(r.Context(), id, p, h.opt.MaxFileBytes)
		if err != nil {
			h.fail(w, "reading "+p, err)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	case http.MethodPost:
		var out []map[string]string
		write := func(dst string, body io.Reader) error {
			b, err := io.ReadAll(io.LimitReader(body, h.opt.MaxFileBytes+1))
			if err != nil {
				return fmt.Errorf("reading the upload of %s: %w", dst, err)
			}
			if int64(len(b)) > h.opt.MaxFileBytes {
				return api.Invalid(fmt.Sprintf("%s: larger than %d bytes, the most one upload may be", dst, h.opt.MaxFileBytes))
			}
			f, err := h.sb.WriteFile(r.Context(), id, homePath(user, dst), b, user)
			if err != nil {
				return err
			}
			out = append(out, map[string]string{"name": f.Name, "type": "file", "path": f.Path})
			return nil
		}
		if err := h.upload(r, p, write); err != nil {
			h.fail(w, "uploading", err)
			return
		}
		if len(out) == 0 {
			writeError(w, http.StatusBadRequest, "no file in the upload (multipart parts named \"file\")")
			return
		}
		writeJSON(w, http.StatusOK, out)
	default:
		writeError(w, http.StatusMethodNotAllowed, r.Method+" /files: want GET or POST")
	}
}

func (h *Handler) upload(r *http.Request, p string, write func(string, io.Reader) error) error {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		if p == "" {
			return api.Invalid("path: missing")
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				return api.Invalid("gzip body: " + err.Error())
			}
			defer zr.Close()
			body = zr
		}
		return write(p, body)
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return api.Invalid("multipart body: " + err.Error())
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return api.Invalid("multipart body: " + err.Error())
		}
		if part.FormName() != "file" {
			continue
		}
		dst := p
		if dst == "" {
			// The filename is the destination path; Part.FileName keeps
			// only its base, so read the header itself.
			_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			dst = params["filename"]
		}
		if dst == "" {
			return api.Invalid("a part has no path: give ?path= or the part's filename")
		}
		if err := write(dst, part); err != nil {
			return err
		}
	}
}

// Directory watches. api.Sandboxes has no change notification, so a watch
// polls the directory's listing and reports the difference (create, write,
// remove, chmod; a rename is a remove and a create). Events come at most
// watchPoll late and a file written and removed between two polls is not
// seen.

const (
	watchPoll   = 200 * time.Millisecond
	maxWatchers = 256
	watchDepth  = 32 // the depth of a recursive watch's listing
)

type snapshot map[string]api.FileInfo // path relative to the watched dir

func (h *Handler) snap(ctx context.Context, id, dir string, recursive bool) (snapshot, error) {
	depth := 1
	if recursive {
		depth = watchDepth
	}
	fs, err := h.sb.ListDir(ctx, id, dir, depth)
	if err != nil {
		return nil, err
	}
	s := snapshot{}
	root := strings.TrimSuffix(dir, "/")
	for _, f := range fs {
		rel := strings.TrimPrefix(strings.TrimPrefix(f.Path, root), "/")
		if rel == "" || !strings.HasPrefix(f.Path, root+"/") {
			rel = f.Name
		}
		s[rel] = f
	}
	return s, nil
}

type fsEvent struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

type watcherEvents struct {
	Events []fsEvent `json:"events"`
}

// diff lists what changed from a to b, in path order of b then a.
func diff(a, b snapshot) []fsEvent {
	var evs []fsEvent
	for _, name := range sortedKeys(b) {
		nf := b[name]
		of, ok := a[name]
		switch {
		case !ok:
			evs = append(evs, fsEvent{name, "EVENT_TYPE_CREATE"})
		case of.Size != nf.Size || !of.ModTime.Equal(nf.ModTime) || of.Type != nf.Type:
			evs = append(evs, fsEvent{name, "EVENT_TYPE_WRITE"})
		case of.Mode != nf.Mode:
			evs = append(evs, fsEvent{name, "EVENT_TYPE_CHMOD"})
		}
	}
	for _, name := range sortedKeys(a) {
		if _, ok := b[name]; !ok {
			evs = append(evs, fsEvent{name, "EVENT_TYPE_REMOVE"})
		}
	}
	return evs
}

func (h *Handler) checkDir(ctx context.Context, id, dir string) error {
	f, err := h.sb.Stat(ctx, id, dir)
	if err != nil {
		return err
	}
	if f.Type != "dir" {
		return rpcErr("invalid_argument", "%s is not a directory", dir)
	}
	return nil
}

// watchDir serves Filesystem.WatchDir: start, then events until the
// client's deadline (the SDK's timeoutMs) or its leaving.
func (h *Handler) watchDir(ctx context.Context, r *http.Request, s *stream, id string, req *watchRequest) {
	if err := h.checkDir(ctx, id, req.Path); err != nil {
		s.end(asRPC("watch "+req.Path, err))
		return
	}
	last, err := h.snap(ctx, id, req.Path, req.Recursive)
	if err != nil {
		s.end(asRPC("watch "+req.Path, err))
		return
	}
	if s.send(map[string]any{"start": map[string]any{}}) != nil {
		return
	}
	poll := time.NewTicker(watchPoll)
	defer poll.Stop()
	quiet := time.Now()
	for {
		select {
		case <-ctx.Done():
			s.end(asRPC("watch "+req.Path, ctx.Err()))
			return
		case <-poll.C:
		}
		now, err := h.snap(ctx, id, req.Path, req.Recursive)
		if err != nil {
			if ctx.Err() == nil {
				s.end(asRPC("watch "+req.Path, err))
			} else {
				s.end(asRPC("watch "+req.Path, ctx.Err()))
			}
			return
		}
		for _, ev := range diff(last, now) {
			if s.send(map[string]any{"filesystem": ev}) != nil {
				return
			}
			quiet = time.Now()
		}
		last = now
		if time.Since(quiet) > keepaliveOf(r) {
			if s.send(map[string]any{"keepalive": map[string]any{}}) != nil {
				return
			}
			quiet = time.Now()
		}
	}
}

// watcher is a polled watch of the Python sync SDK (CreateWatcher, then
// GetWatcherEvents), kept per sandbox: a watcher id opens no other
// sandbox's.
type watcher struct {
	sandbox, dir string
	recursive    bool
	last         snapshot
}

func (h *Handler) createWatcher(ctx context.Context, id string, req *watchRequest) (string, error) {
	if err := h.checkDir(ctx, id, req.Path); err != nil {
		return "", err
	}
	s, err := h.snap(ctx, id, req.Path, req.Recursive)
	if err != nil {
		return "", err
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if len(h.watchers) >= maxWatchers {
		return "", rpcErr("resource_exhausted", "%d watchers at once, the most this server keeps: remove some", maxWatchers)
	}
	wid := randomHex(12)
	h.watchers[wid] = &watcher{sandbox: id, dir: req.Path, recursive: req.Recursive, last: s}
	return wid, nil
}

func (h *Handler) watcherOf(id, wid string) (*watcher, error) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	wt, ok := h.watchers[wid]
	if !ok || wt.sandbox != id {
		return nil, rpcErr("not_found", "watcher %q not found", wid)
	}
	return wt, nil
}

func (h *Handler) watcherEvents(ctx context.Context, id, wid string) ([]fsEvent, error) {
	wt, err := h.watcherOf(id, wid)
	if err != nil {
		return nil, err
	}
	now, err := h.snap(ctx, id, wt.dir, wt.recursive)
	if err != nil {
		return nil, err
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	evs := diff(wt.last, now)
	wt.last = now
	if evs == nil {
		evs = []fsEvent{}
	}
	return evs, nil
}

func (h *Handler) removeWatcher(id, wid string) error {
	if _, err := h.watcherOf(id, wid); err != nil {
		return err
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	delete(h.watchers, wid)
	return nil
}

// dropWatchers forgets a killed sandbox's watchers.
func (h *Handler) dropWatchers(id string) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	for wid, wt := range h.watchers {
		if wt.sandbox == id {
			delete(h.watchers, wid)
		}
	}
}

func sortedKeys(s snapshot) []string { return slices.Sorted(maps.Keys(s)) }

// homePath is p as envd resolves it for user: a relative path is in the
// user's home, root's /root; the default user's is left to the service
// (its home).
func homePath(user, p string) string {
	if user == "root" && p != "" && !path.IsAbs(p) {
		return path.Join("/root", p)
	}
	return p
}
