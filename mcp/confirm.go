package mcp

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Destructive tools (delete_file, reset_session, close_session) need a
// second, deliberate step, so that one call made by a confused or
// prompt-injected model cannot destroy an agent's work:
//
//   - a client that declared elicitation is asked: an elicitation/create
//     form with one boolean, confirm; the call proceeds only when the user
//     accepts with confirm true (in the stateless era the same form goes
//     out as an input_required result);
//   - any other client gets an isError result that says what would be
//     destroyed and carries a one-time confirmation token; calling again
//     with confirm_token proceeds. A token is bound to the tool, the
//     session and the path, is used at most once and expires.
type confirmer struct {
	mu     sync.Mutex
	ttl    time.Duration
	now    func() time.Time
	tokens map[string]confirmation
}

// confirmation is what a token allows.
type confirmation struct {
	op, session, path string
	expires           time.Time
}

// ConfirmTTL is how long a confirmation token stays valid.
const ConfirmTTL = 5 * time.Minute

// maxTokens bounds the tokens kept (expired ones are dropped first).
const maxTokens = 10000

func newConfirmer() *confirmer {
	return &confirmer{ttl: ConfirmTTL, now: time.Now, tokens: map[string]confirmation{}}
}

// confirmSchema is the elicitation form: one boolean.
var confirmSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"confirm": map[string]any{"type": "boolean", "title": "Confirm", "description": "Yes, do it: this cannot be undone"},
	},
	"required": []string{"confirm"},
}

// confirm decides whether a destructive call may go on. It returns nil to
// proceed, or the result to answer with instead (a refusal, a token, or
// an input_required result).
func (c *confirmer) confirm(ctx context.Context, req *CallToolRequest, want confirmation, token, what string) (*CallToolResult, error) {
	if token != "" {
		if c.take(token, want) {
			return nil, nil
		}
		return errorResult("%s: the confirmation token is wrong, used or expired, or was given for another call. "+
			"Nothing was changed. Call %s again without confirm_token to get a new one.", req.Name, req.Name), nil
	}
	question := fmt.Sprintf("%s: permanently %s? This cannot be undone.", req.Name, what)
	if req.Stateless() {
		if req.ex.clientCaps().canElicitForm() {
			return c.confirmStateless(req, question)
		}
	} else {
		res, err := req.Elicit(ctx, ElicitParams{Message: question, RequestedSchema: confirmSchema})
		switch {
		case errors.Is(err, ErrNoElicitation):
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return errorResult("%s: asking the user to confirm failed (%v); nothing was changed", req.Name, err), nil
		default:
			return answer(req.Name, res)
		}
	}
	tok, err := c.issue(want)
	if err != nil {
		return nil, err
	}
	// The token is in the output schema too (issue #17: it was only in
	// prose, and structuredContent said {"session_id":"","done":""}).
	res := errorResult("%s would permanently %s. To confirm, call %s again with the same arguments and "+
		"confirm_token %q (valid once, for %d minutes). Nothing was changed yet.",
		req.Name, what, req.Name, tok, int(c.ttl.Minutes()))
	res.StructuredContent = doneOutput{SessionID: want.session, NeedsConfirmation: true, ConfirmToken: tok}
	return res, nil
}

// confirmStateless asks with an input_required result, or reads the
// answer of the retried call.
func (c *confirmer) confirmStateless(req *CallToolRequest, question string) (*CallToolResult, error) {
	if raw, ok := req.InputResponses["confirm"]; ok {
		var res ElicitResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return errorResult("%s: the confirmation answer is not an elicitation result; nothing was changed", req.Name), nil
		}
		return answer(req.Name, &res)
	}
	return InputRequired(map[string]InputRequest{
		"confirm": {Method: "elicitation/create", Params: ElicitParams{Mode: "form", Message: question, RequestedSchema: confirmSchema}},
	}, "confirm"), nil
}

// answer proceeds only on accept with confirm true.
func answer(tool string, res *ElicitResult) (*CallToolResult, error) {
	if res.Action == "accept" && res.Content["confirm"] == true {
		return nil, nil
	}
	return errorResult("%s was not confirmed by the user (%s); nothing was changed", tool, res.Action), nil
}

func (c *confirmer) issue(want confirmation) (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	tok := "ct_" + base64.RawURLEncoding.EncodeToString(b)
	now := c.now()
	want.expires = now.Add(c.ttl)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tokens) >= maxTokens {
		for k, v := range c.tokens {
			if now.After(v.expires) {
				delete(c.tokens, k)
			}
		}
		if len(c.tokens) >= maxTokens {
			return "", errors.New("too many unconfirmed destructive calls are waiting; confirm or let them expire first")
		}
	}
	c.tokens[tok] = want
	return tok, nil
}

// take consumes token if it allows want.
func (c *confirmer) take(token string, want confirmation) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	got, ok := c.tokens[token]
	if !ok {
		return false
	}
	if c.now().After(got.expires) {
		delete(c.tokens, token)
		return false
	}
	if got.op != want.op || got.session != want.session || got.path != want.path {
		return false // a token for another call stays valid for that call
	}
	delete(c.tokens, token)
	return true
}
