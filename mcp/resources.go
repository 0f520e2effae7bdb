package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Resource is an entry of resources/list.
type Resource struct {
	URI         string `json:"uri"`
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	MIMEType    string `json:"mimeType,omitempty"`
	Size        int64  `json:"size,omitempty"`
}

// ResourceTemplate is an entry of resources/templates/list: an RFC 6570
// URI template such as sandbox://{session}/{+path}.
type ResourceTemplate struct {
	URITemplate string `json:"uriTemplate"`
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	MIMEType    string `json:"mimeType,omitempty"`
}

// ResourceContents is one item of resources/read: Text, or Blob (base64).
type ResourceContents struct {
	URI      string `json:"uri"`
	MIMEType string `json:"mimeType,omitempty"`
	Text     string `json:"text,omitempty"`
	Blob     string `json:"blob,omitempty"`
}

// MarshalJSON writes text contents with "text" even when empty.
func (c ResourceContents) MarshalJSON() ([]byte, error) {
	type plain ResourceContents
	if c.Blob != "" {
		return json.Marshal(plain(c))
	}
	return json.Marshal(struct {
		URI      string `json:"uri"`
		MIMEType string `json:"mimeType,omitempty"`
		Text     string `json:"text"`
	}{c.URI, c.MIMEType, c.Text})
}

// ResourceHandler reads a resource. vars are the template's variables (nil
// for a fixed resource). Return ErrResourceNotFound (wrapped) for a URI that
// does not exist. Implementations serving files must resolve the path
// inside their root, symlinks included (see the tools issue).
type ResourceHandler func(ctx context.Context, uri string, vars map[string]string) ([]ResourceContents, error)

type registeredResource struct {
	res Resource
	h   ResourceHandler
}

type registeredTemplate struct {
	tmpl ResourceTemplate
	re   *regexp.Regexp
	vars []string
	h    ResourceHandler
}

// AddResource registers a fixed resource.
func (s *Server) AddResource(r Resource, h ResourceHandler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resources = append(s.resources, &registeredResource{res: r, h: h})
	s.broadcastLocked("notifications/resources/list_changed")
}

// ResourceLister lists resources that change at run time (a session's
// files) for one protocol session; its entries follow the fixed resources
// in resources/list.
type ResourceLister func(ctx context.Context, ss *Session) ([]Resource, error)

func (s *Server) addResourceLister(l ResourceLister) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listers = append(s.listers, l)
}

// AddResourceTemplate registers a template. Supported expressions are
// {var} (no "/") and {+var} (any characters, "/" included). It panics on a
// malformed template.
func (s *Server) AddResourceTemplate(t ResourceTemplate, h ResourceHandler) {
	re, vars, err := compileTemplate(t.URITemplate)
	if err != nil {
		panic(fmt.Sprintf("mcp: resource template %q: %v", t.URITemplate, err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.templates = append(s.templates, &registeredTemplate{tmpl: t, re: re, vars: vars, h: h})
}

// Compiled on first use, not in every sandcell process's init (helpers
// re-executed from the binary included).
var templateExpr = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\{(\+?)([A-Za-z0-9_]+)\}`) })

func compileTemplate(t string) (*regexp.Regexp, []string, error) {
	var b strings.Builder
	var vars []string
	b.WriteString("^")
	last := 0
	for _, m := range templateExpr().FindAllStringSubmatchIndex(t, -1) {
		b.WriteString(regexp.QuoteMeta(t[last:m[0]]))
		if t[m[2]:m[3]] == "+" {
			b.WriteString("(.+)")
		} else {
			b.WriteString("([^/?#]+)")
		}
		vars = append(vars, t[m[4]:m[5]])
		last = m[1]
	}
	rest := t[last:]
	if strings.ContainsAny(rest, "{}") {
		return nil, nil, errors.New("unsupported expression")
	}
	b.WriteString(regexp.QuoteMeta(rest))
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	return re, vars, err
}

func handleListResources(ctx context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p listParams
	if err := decodeParams(params, &p); err != nil {
		return nil, err
	}
	s := ex.ss.srv
	s.mu.Lock()
	list := make([]Resource, len(s.resources))
	for i, r := range s.resources {
		list[i] = r.res
	}
	listers := slices.Clone(s.listers)
	s.mu.Unlock()
	for _, l := range listers {
		more, err := l(ctx, ex.ss)
		if err != nil {
			return nil, err
		}
		list = append(list, more...)
	}
	page, next, err := paginate(list, p.Cursor, s.opts.PageSize)
	if err != nil {
		return nil, err
	}
	return struct {
		Resources  []Resource `json:"resources"`
		NextCursor string     `json:"nextCursor,omitempty"`
	}{page, next}, nil
}

func handleListTemplates(_ context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p listParams
	if err := decodeParams(params, &p); err != nil {
		return nil, err
	}
	s := ex.ss.srv
	s.mu.Lock()
	list := make([]ResourceTemplate, len(s.templates))
	for i, t := range s.templates {
		list[i] = t.tmpl
	}
	s.mu.Unlock()
	page, next, err := paginate(list, p.Cursor, s.opts.PageSize)
	if err != nil {
		return nil, err
	}
	return struct {
		ResourceTemplates []ResourceTemplate `json:"resourceTemplates"`
		NextCursor        string             `json:"nextCursor,omitempty"`
	}{page, next}, nil
}

type uriParams struct {
	URI string `json:"uri"`
}

// findResource is the handler for uri: a fixed resource, else the first
// matching template.
func (s *Server) findResource(uri string) (ResourceHandler, map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.resources {
		if r.res.URI == uri {
			return r.h, nil
		}
	}
	for _, t := range s.templates {
		if m := t.re.FindStringSubmatch(uri); m != nil {
			vars := map[string]string{}
			for i, v := range t.vars {
				vars[v] = m[i+1]
			}
			return t.h, vars
		}
	}
	return nil, nil
}

func handleReadResource(ctx context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p uriParams
	if err := decodeParams(params, &p); err != nil {
		return nil, err
	}
	if p.URI == "" {
		return nil, errorf(CodeInvalidParams, "resources/read needs a uri")
	}
	h, vars := ex.ss.srv.findResource(p.URI)
	if h == nil {
		return nil, &Error{Code: CodeResourceNotFound, Message: "resource not found: " + truncate(p.URI, 200), Data: map[string]string{"uri": p.URI}}
	}
	contents, err := h(ctx, p.URI, vars)
	if errors.Is(err, ErrResourceNotFound) {
		return nil, &Error{Code: CodeResourceNotFound, Message: err.Error(), Data: map[string]string{"uri": p.URI}}
	}
	if err != nil {
		return nil, err
	}
	return struct {
		Contents []ResourceContents `json:"contents"`
	}{contents}, nil
}

func handleSubscribe(_ context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p uriParams
	if err := decodeParams(params, &p); err != nil || p.URI == "" {
		return nil, errorf(CodeInvalidParams, "resources/subscribe needs a uri")
	}
	ex.ss.mu.Lock()
	defer ex.ss.mu.Unlock()
	if !ex.ss.subs[p.URI] && len(ex.ss.subs) >= maxSubscriptions {
		return nil, errorf(CodeInvalidParams, "this session has %d subscriptions, the most it may have: unsubscribe from some first", maxSubscriptions)
	}
	ex.ss.subs[p.URI] = true
	return struct{}{}, nil
}

func handleUnsubscribe(_ context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p uriParams
	if err := decodeParams(params, &p); err != nil || p.URI == "" {
		return nil, errorf(CodeInvalidParams, "resources/unsubscribe needs a uri")
	}
	ex.ss.mu.Lock()
	delete(ex.ss.subs, p.URI)
	ex.ss.mu.Unlock()
	return struct{}{}, nil
}
