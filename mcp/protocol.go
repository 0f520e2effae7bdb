package mcp

import (
	"encoding/json"
	"slices"
)

// Protocol versions. The handshake era negotiates one per session with
// initialize; the stateless era (2026-07-28) names it on every request.
const (
	Version20241105 = "2024-11-05"
	Version20250326 = "2025-03-26"
	Version20250618 = "2025-06-18"
	Version20251125 = "2025-11-25"
	Version20260728 = "2026-07-28"

	// LatestHandshakeVersion is what initialize answers with when the
	// client asks for a version this server does not speak.
	LatestHandshakeVersion = Version20251125
)

// handshakeVersions are the versions initialize accepts, newest first.
var handshakeVersions = []string{Version20251125, Version20250618, Version20250326, Version20241105}

// statelessVersions are the versions of the stateless era, newest first.
var statelessVersions = []string{Version20260728}

// SupportedVersions lists every protocol version this package speaks, newest
// first.
func SupportedVersions() []string {
	return append(slices.Clone(statelessVersions), handshakeVersions...)
}

func isSupportedVersion(v string) bool {
	return slices.Contains(handshakeVersions, v) || slices.Contains(statelessVersions, v)
}

// isStateless reports whether v is a stateless-era version (2026-07-28 and
// later: versions are dates, so they compare as strings).
func isStateless(v string) bool { return v >= Version20260728 }

// _meta keys of the stateless era.
const (
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaServerInfo         = "io.modelcontextprotocol/serverInfo"
	MetaLogLevel           = "io.modelcontextprotocol/logLevel"
)

// Implementation names a client or server.
type Implementation struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version"`
}

// ClientCapabilities is what the client declared. Only the parts the server
// acts on are typed; the rest is kept raw.
type ClientCapabilities struct {
	Elicitation  json.RawMessage `json:"elicitation,omitempty"`
	Sampling     json.RawMessage `json:"sampling,omitempty"`
	Roots        json.RawMessage `json:"roots,omitempty"`
	Experimental json.RawMessage `json:"experimental,omitempty"`
}

// canElicitForm reports whether the client accepts form elicitation: an
// elicitation capability of {} (before 2025-11-25 that meant forms) or one
// with "form".
func (c *ClientCapabilities) canElicitForm() bool {
	if c == nil || len(c.Elicitation) == 0 || string(c.Elicitation) == "null" {
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(c.Elicitation, &m) != nil {
		return false
	}
	_, form := m["form"]
	_, url := m["url"]
	return form || !url
}

type initializeParams struct {
	ProtocolVersion string              `json:"protocolVersion"`
	Capabilities    *ClientCapabilities `json:"capabilities"`
	ClientInfo      *Implementation     `json:"clientInfo"`
}

type initializeResult struct {
	ProtocolVersion string             `json:"protocolVersion"`
	Capabilities    serverCapabilities `json:"capabilities"`
	ServerInfo      Implementation     `json:"serverInfo"`
	Instructions    string             `json:"instructions,omitempty"`
}

type serverCapabilities struct {
	Tools       *listChangedCap `json:"tools,omitempty"`
	Resources   *resourcesCap   `json:"resources,omitempty"`
	Prompts     *listChangedCap `json:"prompts,omitempty"`
	Logging     *struct{}       `json:"logging,omitempty"`
	Completions *struct{}       `json:"completions,omitempty"`
}

type listChangedCap struct {
	ListChanged bool `json:"listChanged"`
}

type resourcesCap struct {
	Subscribe   bool `json:"subscribe"`
	ListChanged bool `json:"listChanged"`
}

// discoverResult answers server/discover (2026-07-28).
type discoverResult struct {
	Meta              map[string]any     `json:"_meta,omitempty"`
	SupportedVersions []string           `json:"supportedVersions"`
	Capabilities      serverCapabilities `json:"capabilities"`
	Instructions      string             `json:"instructions,omitempty"`
}

// ToolAnnotations are hints about a tool's behaviour. The protocol's
// defaults (when a hint is absent) are the most cautious: not read-only,
// destructive, not idempotent, open world. Pointers so that every hint is
// written out explicitly.
type ToolAnnotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// Ptr returns a pointer to v (for annotations).
func Ptr[T any](v T) *T { return &v }

// Tool describes a tool in tools/list. InputSchema and OutputSchema are set
// by AddTool from the handler's types unless given.
type Tool struct {
	Name         string           `json:"name"`
	Title        string           `json:"title,omitempty"`
	Description  string           `json:"description"`
	InputSchema  any              `json:"inputSchema"`
	OutputSchema any              `json:"outputSchema,omitempty"`
	Annotations  *ToolAnnotations `json:"annotations,omitempty"`
	Meta         map[string]any   `json:"_meta,omitempty"`
}

// Content is one block of a tool result, prompt message or similar:
// text, image, audio, resource_link or an embedded resource.
type Content struct {
	Type     string            `json:"type"`
	Text     string            `json:"text,omitempty"`
	Data     string            `json:"data,omitempty"` // base64, image and audio
	MIMEType string            `json:"mimeType,omitempty"`
	URI      string            `json:"uri,omitempty"`  // resource_link
	Name     string            `json:"name,omitempty"` // resource_link
	Resource *ResourceContents `json:"resource,omitempty"`
}

// TextContent is a text block.
func TextContent(s string) Content { return Content{Type: "text", Text: s} }

// MarshalJSON keeps "text" present (possibly empty) on text blocks: clients
// validate that field as required.
func (c Content) MarshalJSON() ([]byte, error) {
	type plain Content
	if c.Type != "text" {
		return json.Marshal(plain(c))
	}
	return json.Marshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{c.Type, c.Text})
}

// CallToolResult is the result of tools/call.
type CallToolResult struct {
	Content           []Content `json:"content"`
	StructuredContent any       `json:"structuredContent,omitempty"`
	IsError           bool      `json:"isError,omitempty"`
	// InputRequests and RequestState: stateless-era elicitation
	// (resultType "input_required"); see InputRequired.
	InputRequests map[string]InputRequest `json:"inputRequests,omitempty"`
	RequestState  string                  `json:"requestState,omitempty"`
}

// InputRequest is a server-to-client request carried inside an
// input_required result (stateless era): the client answers it and retries
// the call with inputResponses.
type InputRequest struct {
	Method string `json:"method"`
	Params any    `json:"params,omitempty"`
}

type callToolParams struct {
	Name           string                     `json:"name"`
	Arguments      json.RawMessage            `json:"arguments,omitempty"`
	Meta           map[string]json.RawMessage `json:"_meta,omitempty"`
	InputResponses map[string]json.RawMessage `json:"inputResponses,omitempty"`
	RequestState   string                     `json:"requestState,omitempty"`
}

// legacyCallParams are the seed's call_tool params.
type legacyCallParams struct {
	Tool      string          `json:"tool"`
	Name      string          `json:"name"` // tolerated: some seed-era clients send name
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

type listParams struct {
	Cursor *string `json:"cursor,omitempty"`
}

// LoggingLevel is a syslog severity, as MCP names them.
type LoggingLevel string

// logLevels in increasing severity.
var logLevels = []LoggingLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

func levelRank(l LoggingLevel) int { return slices.Index(logLevels, l) }

type progressParams struct {
	ProgressToken json.RawMessage `json:"progressToken"`
	Progress      float64         `json:"progress"`
	Total         *float64        `json:"total,omitempty"`
	Message       string          `json:"message,omitempty"`
	Meta          map[string]any  `json:"_meta,omitempty"`
}

type cancelledParams struct {
	RequestID json.RawMessage `json:"requestId"`
	Reason    string          `json:"reason,omitempty"`
}

type logMessageParams struct {
	Level  LoggingLevel `json:"level"`
	Logger string       `json:"logger,omitempty"`
	Data   any          `json:"data"`
}
