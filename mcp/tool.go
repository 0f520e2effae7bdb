package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// ToolHandlerFor handles a call of a typed tool. in has been validated
// against the input schema. An error becomes a result with isError set and
// the error's text (a message the model can act on), not a protocol error.
// A nil result is built from out: structuredContent, and the same JSON as a
// text block.
type ToolHandlerFor[In, Out any] func(ctx context.Context, req *CallToolRequest, in In) (*CallToolResult, Out, error)

// CallToolRequest is a running tool call: its name and raw arguments, and
// the means to report progress, log, and ask the user.
type CallToolRequest struct {
	Name      string
	Arguments json.RawMessage
	// InputResponses and RequestState: the retry of a stateless-era call
	// that returned InputRequired.
	InputResponses map[string]json.RawMessage
	RequestState   string
	ex             *exchange
}

// Progress reports progress (notifications/progress) if the client asked
// for it; progress must increase, total may be 0 (unknown).
func (r *CallToolRequest) Progress(progress, total float64, message string) {
	var t *float64
	if total > 0 {
		t = &total
	}
	r.ex.progress(progress, t, message, nil)
}

// Log sends notifications/message to the client at or above its level.
// Never pass secrets.
func (r *CallToolRequest) Log(level LoggingLevel, logger string, data any) {
	r.ex.logMessage(level, logger, data)
}

// Stateless reports whether the call uses the stateless era (elicit with
// InputRequired, not Elicit).
func (r *CallToolRequest) Stateless() bool { return r.ex.stateless }

// ElicitParams is a form elicitation: a message and a flat object schema of
// primitive properties.
type ElicitParams struct {
	Mode            string         `json:"mode,omitempty"`
	Message         string         `json:"message"`
	RequestedSchema map[string]any `json:"requestedSchema"`
}

// ElicitResult is the user's answer: action is accept, decline or cancel.
type ElicitResult struct {
	Action  string         `json:"action"`
	Content map[string]any `json:"content,omitempty"`
}

// Elicit asks the user through the client (elicitation/create) and waits.
// It fails with ErrNoElicitation when the client did not declare the
// capability or the call is stateless (use InputRequired there).
func (r *CallToolRequest) Elicit(ctx context.Context, p ElicitParams) (*ElicitResult, error) {
	if r.ex.stateless || !r.ex.clientCaps().canElicitForm() {
		return nil, ErrNoElicitation
	}
	if p.Mode == "" && r.ex.ss.ProtocolVersion() >= Version20251125 {
		p.Mode = "form"
	}
	raw, err := r.ex.request(ctx, "elicitation/create", p)
	if err != nil {
		return nil, err
	}
	var res ElicitResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("elicitation answer: %w", err)
	}
	return &res, nil
}

// CreateMessage asks the client's model (sampling/createMessage). params and
// the result are passed through as JSON.
func (r *CallToolRequest) CreateMessage(ctx context.Context, params any) (json.RawMessage, error) {
	caps := r.ex.clientCaps()
	if r.ex.stateless || caps == nil || len(caps.Sampling) == 0 {
		return nil, errors.New("the client does not support sampling")
	}
	return r.ex.request(ctx, "sampling/createMessage", params)
}

// InputRequired is the stateless era's elicitation: return it as the
// result and the client answers the requests and retries the call with
// inputResponses (CallToolRequest.InputResponses) and the same state.
func InputRequired(requests map[string]InputRequest, state string) *CallToolResult {
	return &CallToolResult{InputRequests: requests, RequestState: state}
}

// registeredTool is a tool and its untyped handler.
type registeredTool struct {
	tool    Tool
	handler func(ctx context.Context, req *CallToolRequest) (*CallToolResult, any, error)
}

// toolName is what the specification allows as a tool name.
var toolName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`) })

// AddTool registers a typed tool. Unless t sets them, the input schema is
// inferred from In and the output schema from Out (none when Out is any),
// with github.com/google/jsonschema-go (struct fields without omitempty are
// required; additional properties are refused). Arguments are validated
// against the input schema before h runs. It panics on a programming error
// (a bad name, a duplicate, a type with no schema), as registration happens
// at start-up.
func AddTool[In, Out any](s *Server, t *Tool, h ToolHandlerFor[In, Out]) {
	tool := *t
	if !toolName().MatchString(tool.Name) {
		panic(fmt.Sprintf("mcp: tool name %q does not match %s", tool.Name, toolName()))
	}
	inSchema, err := schemaFor[In](tool.InputSchema)
	if err != nil {
		panic(fmt.Sprintf("mcp: tool %s: input schema: %v", tool.Name, err))
	}
	if inSchema.Type != "object" {
		panic(fmt.Sprintf("mcp: tool %s: the input schema must be an object schema", tool.Name))
	}
	plainTypes(inSchema)
	inResolved, err := inSchema.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true})
	if err != nil {
		panic(fmt.Sprintf("mcp: tool %s: input schema: %v", tool.Name, err))
	}
	// Published: the same schema with null allowed for every optional
	// property; validated here: the plain one, after dropNulls.
	tool.InputSchema = nullableOptional(inSchema.CloneSchemas())
	hasOut := reflect.TypeFor[Out]() != reflect.TypeFor[any]()
	if hasOut {
		outSchema, err := schemaFor[Out](tool.OutputSchema)
		if err != nil {
			panic(fmt.Sprintf("mcp: tool %s: output schema: %v", tool.Name, err))
		}
		plainTypes(outSchema)
		tool.OutputSchema = outSchema
	}
	rt := &registeredTool{tool: tool}
	rt.handler = func(ctx context.Context, req *CallToolRequest) (*CallToolResult, any, error) {
		args := bytes.TrimSpace(req.Arguments)
		if len(args) == 0 || string(args) == "null" {
			args = []byte("{}")
		}
		var inst map[string]any
		if err := json.Unmarshal(args, &inst); err != nil {
			return errorResult("invalid arguments for tool %s: arguments must be a JSON object", tool.Name), nil, nil
		}
		// An optional argument given as null is absent, at any depth:
		// clients write null for "not set" (nullableOptional).
		dropNulls(inSchema, inst)
		if err := inResolved.ApplyDefaults(&inst); err != nil {
			return errorResult("invalid arguments for tool %s: %v", tool.Name, err), nil, nil
		}
		if err := inResolved.Validate(inst); err != nil {
			return errorResult("invalid arguments for tool %s: %s", tool.Name, cleanSchemaError(err)), nil, nil
		}
		withDefaults, _ := json.Marshal(inst)
		var in In
		if err := json.Unmarshal(withDefaults, &in); err != nil {
			return errorResult("invalid arguments for tool %s: %v", tool.Name, err), nil, nil
		}
		res, out, err := h(ctx, req, in)
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil, nil, err // cancelled: no answer is sent anyway
			}
			return errorResult("%s", err.Error()), nil, nil
		}
		if res == nil {
			res = &CallToolResult{}
		}
		if res.InputRequests != nil {
			return res, nil, nil
		}
		// An error result has no structured content unless the handler
		// gave one: the zero Out ({"session_id":"","done":""}) says
		// nothing (issue #17).
		if hasOut && res.StructuredContent == nil && !res.IsError {
			res.StructuredContent = out
		}
		if res.StructuredContent != nil {
			res.StructuredContent = nonNil(res.StructuredContent)
		}
		if res.Content == nil {
			res.Content = []Content{}
			if res.StructuredContent != nil {
				b, err := marshal(res.StructuredContent)
				if err != nil {
					return nil, nil, err
				}
				res.Content = append(res.Content, TextContent(string(b)))
			}
		}
		return res, out, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, other := range s.tools {
		if other.tool.Name == tool.Name {
			panic(fmt.Sprintf("mcp: tool %s registered twice", tool.Name))
		}
	}
	s.tools = append(s.tools, rt)
	s.broadcastLocked("notifications/tools/list_changed")
}

// replaceTool registers a tool again, in its place in the list: add
// registers the new one (a tool not registered yet is added at the end).
func (s *Server) replaceTool(name string, add func()) {
	s.mu.Lock()
	at := slices.IndexFunc(s.tools, func(t *registeredTool) bool { return t.tool.Name == name })
	if at >= 0 {
		s.tools = slices.Delete(s.tools, at, at+1)
	}
	s.mu.Unlock()
	add()
	if at < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.tools[len(s.tools)-1]
	s.tools = slices.Insert(s.tools[:len(s.tools)-1], at, last)
}

// broadcastLocked notifies the sessions of a list change (s.mu held).
func (s *Server) broadcastLocked(method string) {
	for ss := range s.sessions {
		go ss.Notify(method, nil)
	}
}

// schemaFor is given (a *jsonschema.Schema or its JSON) or the schema
// inferred from T.
func schemaFor[T any](given any) (*jsonschema.Schema, error) {
	switch g := given.(type) {
	case nil:
		return jsonschema.For[T](nil)
	case *jsonschema.Schema:
		return g, nil
	default:
		b, err := json.Marshal(g)
		if err != nil {
			return nil, err
		}
		var s jsonschema.Schema
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, err
		}
		return &s, nil
	}
}

// maxSchemaError bounds a validation error's text: jsonschema-go quotes
// the value it refused, and a 5 MB source made a 5.3 MB error (issue #17).
const maxSchemaError = 500

// cleanSchemaError shortens jsonschema-go's messages to what a model
// needs, at most maxSchemaError bytes.
func cleanSchemaError(err error) string {
	msg := strings.TrimPrefix(err.Error(), "validating root: ")
	if rest, ok := strings.CutPrefix(msg, "validating /properties/"); ok {
		if name, why, ok := strings.Cut(rest, ": "); ok {
			msg = "argument " + name + ": " + why
		}
	}
	if len(msg) > maxSchemaError {
		msg = fmt.Sprintf("%s (message cut: %d bytes)", truncate(msg, maxSchemaError), len(msg))
	}
	return msg
}

// plainTypes turns every type union with null (jsonschema-go writes
// ["null", "array"] for a slice, map or pointer) into the plain type:
// clients that map a schema to one type per field weakened or refused the
// 20 such unions of sandcell's tools (issue #17). In a result absence is
// what says "not set" (nonNil makes results agree); an argument may also
// be null (nullableOptional).
func plainTypes(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) == 2 && slices.Contains(s.Types, "null") {
		plain := slices.DeleteFunc(slices.Clone(s.Types), func(t string) bool { return t == "null" })
		s.Type, s.Types = plain[0], nil
	}
	for _, c := range s.Properties {
		plainTypes(c)
	}
	for _, c := range s.Defs {
		plainTypes(c)
	}
	for _, c := range s.PatternProperties {
		plainTypes(c)
	}
	for _, list := range [][]*jsonschema.Schema{s.PrefixItems, s.AllOf, s.AnyOf, s.OneOf} {
		for _, c := range list {
			plainTypes(c)
		}
	}
	plainTypes(s.Items)
	plainTypes(s.AdditionalProperties)
	plainTypes(s.Not)
}

// nullableOptional makes every optional property of s, at any depth (the
// properties of its properties, of its array items), accept null as well,
// and returns s. Clients write null for an argument they do not set, and
// some check the arguments against the published schema before sending:
// LangChain's MCP adapter refused execute_code with "args": null (issue
// #37). The property becomes {"anyOf": [plain schema, {"type": "null"}]},
// its title, description and default outside: the form Pydantic publishes
// for an Optional field, which every client that maps a property to one
// type reads as that type, unlike a type union ["null", X] (plainTypes,
// issue #17). The server drops such nulls before it validates (dropNulls).
func nullableOptional(s *jsonschema.Schema) *jsonschema.Schema {
	if s == nil {
		return nil
	}
	for name, p := range s.Properties {
		nullableOptional(p)
		if slices.Contains(s.Required, name) {
			continue
		}
		plain := *p
		plain.Title, plain.Description, plain.Default = "", "", nil
		s.Properties[name] = &jsonschema.Schema{Title: p.Title, Description: p.Description, Default: p.Default,
			AnyOf: []*jsonschema.Schema{&plain, {Type: "null"}}}
	}
	nullableOptional(s.Items)
	nullableOptional(s.AdditionalProperties)
	return s
}

// dropNulls deletes from the arguments v every optional property of s
// given as null, at any depth that s describes (as nullableOptional
// publishes them): null is "not set". A null anywhere else (a required
// property, an entry of a map, an undeclared name) stays, and the plain
// schema refuses it.
func dropNulls(s *jsonschema.Schema, v any) {
	if s == nil {
		return
	}
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			p := s.Properties[k]
			switch {
			case p == nil:
			case x == nil && !slices.Contains(s.Required, k):
				delete(v, k)
			default:
				dropNulls(p, x)
			}
		}
	case []any:
		for _, x := range v {
			dropNulls(s.Items, x)
		}
	}
}

// nonNil is v with every nil slice and map of a field that is always
// written (no omitempty) made empty, at any depth of structs: with the
// plain types of plainTypes, JSON null there would not match the output
// schema.
func nonNil(v any) any {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return v
	}
	cp := reflect.New(rv.Type()).Elem()
	cp.Set(rv)
	fillNil(cp)
	return cp.Interface()
}

func fillNil(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			e := reflect.New(v.Type().Elem())
			e.Elem().Set(v.Elem())
			fillNil(e.Elem())
			v.Set(e)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			fv := v.Field(i)
			omit := strings.Contains(f.Tag.Get("json"), ",omitempty")
			switch {
			case fv.Kind() == reflect.Slice && fv.IsNil() && !omit && !f.Anonymous:
				fv.Set(reflect.MakeSlice(fv.Type(), 0, 0))
			case fv.Kind() == reflect.Map && fv.IsNil() && !omit:
				fv.Set(reflect.MakeMap(fv.Type()))
			default:
				fillNil(fv)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Struct && v.Len() > 0 {
			cp := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
			reflect.Copy(cp, v)
			for i := range cp.Len() {
				fillNil(cp.Index(i))
			}
			v.Set(cp)
		}
	}
}

// errorResult is an isError result with one text block.
func errorResult(format string, args ...any) *CallToolResult {
	return &CallToolResult{Content: []Content{TextContent(fmt.Sprintf(format, args...))}, IsError: true}
}

func (s *Server) lookupTool(name string) *registeredTool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tools {
		if t.tool.Name == name {
			return t
		}
	}
	return nil
}

func handleListTools(_ context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p listParams
	if err := decodeParams(params, &p); err != nil {
		return nil, err
	}
	s := ex.ss.srv
	s.mu.Lock()
	tools := make([]Tool, len(s.tools))
	for i, t := range s.tools {
		tools[i] = t.tool
	}
	s.mu.Unlock()
	page, next, err := paginate(tools, p.Cursor, s.opts.PageSize)
	if err != nil {
		return nil, err
	}
	return struct {
		Tools      []Tool `json:"tools"`
		NextCursor string `json:"nextCursor,omitempty"`
	}{page, next}, nil
}

// callTool runs a tool; unknown tools are invalid params.
func callTool(ctx context.Context, ex *exchange, p callToolParams) (*CallToolResult, error) {
	t := ex.ss.srv.lookupTool(p.Name)
	if t == nil {
		return nil, errorf(CodeInvalidParams, "unknown tool %q: call tools/list for the tools this server has", truncate(p.Name, 128))
	}
	if tok, ok := p.Meta["progressToken"]; ok && len(ex.token) == 0 {
		ex.token = bytes.TrimSpace(tok)
	}
	req := &CallToolRequest{Name: p.Name, Arguments: p.Arguments, InputResponses: p.InputResponses, RequestState: p.RequestState, ex: ex}
	res, _, err := t.handler(ctx, req)
	return res, err
}

func handleCallTool(ctx context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p callToolParams
	if params == nil {
		return nil, errorf(CodeInvalidParams, "tools/call needs params {name, arguments}")
	}
	if err := decodeParams(params, &p); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return nil, errorf(CodeInvalidParams, "tools/call needs a tool name")
	}
	return callTool(ctx, ex, p)
}

// handleLegacyCall is the seed's call_tool {tool, arguments}: it answers
// with the tool's structured result itself (the flat result object), and
// with invalid params when the tool refused the arguments.
func handleLegacyCall(ctx context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p legacyCallParams
	if params == nil {
		return nil, errorf(CodeInvalidParams, "call_tool needs params {tool, arguments}")
	}
	if err := decodeParams(params, &p); err != nil {
		return nil, err
	}
	name := p.Tool
	if name == "" {
		name = p.Name
	}
	if name == "" {
		return nil, errorf(CodeInvalidParams, "call_tool needs params {tool, arguments}")
	}
	res, err := callTool(ctx, ex, callToolParams{Name: name, Arguments: p.Arguments})
	if err != nil {
		return nil, err
	}
	if res.StructuredContent != nil {
		return res.StructuredContent, nil
	}
	var text []string
	for _, c := range res.Content {
		if c.Type == "text" {
			text = append(text, c.Text)
		}
	}
	if res.IsError {
		return nil, errorf(CodeInvalidParams, "%s", strings.Join(text, "\n"))
	}
	return res, nil
}

// session is the call's protocol session: the one that remembers the
// sandbox sessions it used, for resources/list. A stream (stdio, TCP) is
// one client whatever era its requests name (issue #17: resources/list of
// the stateless era never listed session files); a stateless HTTP request
// is its own session, so nil: nothing identifies its client, and listing
// the session ids of whoever else reached the port would hand out their
// files (an id is the capability to them).
func (r *CallToolRequest) session() *Session {
	if r.ex == nil || (r.ex.stateless && r.ex.ss.transport == "http") {
		return nil
	}
	return r.ex.ss
}
