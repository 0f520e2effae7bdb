package mcp

import (
	"context"
	"encoding/json"
)

// Prompt is an entry of prompts/list.
type Prompt struct {
	Name        string           `json:"name"`
	Title       string           `json:"title,omitempty"`
	Description string           `json:"description,omitempty"`
	Arguments   []PromptArgument `json:"arguments,omitempty"`
}

// PromptArgument is one argument of a prompt.
type PromptArgument struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required,omitempty"`
}

// PromptMessage is one message of prompts/get.
type PromptMessage struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
}

// PromptResult is the result of prompts/get.
type PromptResult struct {
	Description string          `json:"description,omitempty"`
	Messages    []PromptMessage `json:"messages"`
}

// PromptHandler renders a prompt with its arguments.
type PromptHandler func(ctx context.Context, args map[string]string) (*PromptResult, error)

type registeredPrompt struct {
	p Prompt
	h PromptHandler
}

// AddPrompt registers a prompt (the server then declares the prompts
// capability).
func (s *Server) AddPrompt(p Prompt, h PromptHandler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prompts = append(s.prompts, &registeredPrompt{p: p, h: h})
	s.broadcastLocked("notifications/prompts/list_changed")
}

// CompletionHandler answers completion/complete: ref is the prompt or
// resource template, arg the argument being completed and its value so far.
type CompletionHandler func(ctx context.Context, ref CompletionRef, arg, value string) ([]string, error)

// CompletionRef names what is being completed.
type CompletionRef struct {
	Type string `json:"type"` // ref/prompt or ref/resource
	Name string `json:"name,omitempty"`
	URI  string `json:"uri,omitempty"`
}

// SetCompletionHandler enables completion/complete.
func (s *Server) SetCompletionHandler(h CompletionHandler) {
	s.mu.Lock()
	s.completer = h
	s.mu.Unlock()
}

func handleListPrompts(_ context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p listParams
	if err := decodeParams(params, &p); err != nil {
		return nil, err
	}
	s := ex.ss.srv
	s.mu.Lock()
	list := make([]Prompt, len(s.prompts))
	for i, r := range s.prompts {
		list[i] = r.p
	}
	s.mu.Unlock()
	page, next, err := paginate(list, p.Cursor, s.opts.PageSize)
	if err != nil {
		return nil, err
	}
	return struct {
		Prompts    []Prompt `json:"prompts"`
		NextCursor string   `json:"nextCursor,omitempty"`
	}{page, next}, nil
}

func handleGetPrompt(ctx context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p struct {
		Name      string            `json:"name"`
		Arguments map[string]string `json:"arguments"`
	}
	if err := decodeParams(params, &p); err != nil {
		return nil, err
	}
	s := ex.ss.srv
	s.mu.Lock()
	var found *registeredPrompt
	for _, r := range s.prompts {
		if r.p.Name == p.Name {
			found = r
		}
	}
	s.mu.Unlock()
	if found == nil {
		return nil, errorf(CodeInvalidParams, "unknown prompt %q", truncate(p.Name, 128))
	}
	for _, a := range found.p.Arguments {
		if _, ok := p.Arguments[a.Name]; a.Required && !ok {
			return nil, errorf(CodeInvalidParams, "prompt %s needs argument %q", p.Name, a.Name)
		}
	}
	return found.h(ctx, p.Arguments)
}

func handleComplete(ctx context.Context, ex *exchange, params json.RawMessage) (any, error) {
	var p struct {
		Ref      CompletionRef `json:"ref"`
		Argument struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"argument"`
	}
	if err := decodeParams(params, &p); err != nil {
		return nil, err
	}
	s := ex.ss.srv
	s.mu.Lock()
	h := s.completer
	s.mu.Unlock()
	var values []string
	if h != nil {
		var err error
		if values, err = h(ctx, p.Ref, p.Argument.Name, p.Argument.Value); err != nil {
			return nil, err
		}
	}
	if values == nil {
		values = []string{}
	}
	total := len(values)
	if len(values) > 100 {
		values = values[:100]
	}
	return map[string]any{"completion": map[string]any{"values": values, "total": total, "hasMore": total > len(values)}}, nil
}
