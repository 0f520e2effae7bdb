package mcp

import "errors"

// Sentinel errors. Protocol errors on the wire are *Error values with a
// JSON-RPC code; these are for callers of the package's API.
var (
	// ErrNoElicitation: the client did not declare the elicitation
	// capability, or the call is stateless (which elicits with
	// InputRequired instead).
	ErrNoElicitation = errors.New("the client does not support elicitation")
	// ErrResourceNotFound, returned (wrapped) by a ResourceHandler, makes
	// resources/read answer CodeResourceNotFound.
	ErrResourceNotFound = errors.New("resource not found")
)
