package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandcell/sandcell/api"
)

// Installer installs a language's packages as a dependency layer:
// install_dependencies, and execute_code's dependencies. cmd/sandcell
// implements it; a server without it (installs turned off) has neither.
type Installer interface {
	// InstallDependencies installs req.Packages for req.Language (or
	// finds the same set installed before) and, with a session, makes
	// later runs of the session in that language see them. An error
	// means refused (unknown language, bad requirement, installs off) or
	// failed (the package manager's error is in its text).
	InstallDependencies(ctx context.Context, req InstallRequest) (InstallResult, error)
}

// InstallRequest is install_dependencies' arguments.
type InstallRequest struct {
	Language  string   `json:"language" jsonschema:"the language whose package manager installs (python: pip, javascript: npm)"`
	Packages  []string `json:"packages" jsonschema:"requirements: package names with optional version constraints (requests==2.31.0, lodash@4.17.21); no URLs, paths or options"`
	SessionID string   `json:"session_id,omitempty" jsonschema:"make the packages available to this session's later runs; without it, pass the same packages as dependencies to execute_code"`
}

// InstallResult is install_dependencies' result.
type InstallResult struct {
	Language     string   `json:"language" jsonschema:"the language the packages are for"`
	Requirements []string `json:"requirements" jsonschema:"the requirement set installed, normalised (sorted, names canonical); with a session, everything it has installed for the language"`
	Layer        string   `json:"layer" jsonschema:"the dependency layer's key (the same set gives the same layer)"`
	Cached       bool     `json:"cached" jsonschema:"the same set was installed before: nothing was downloaded"`
	Bytes        int64    `json:"bytes" jsonschema:"the layer's size in bytes"`
	Files        int      `json:"files" jsonschema:"the number of entries in the layer"`
	InstallMS    int64    `json:"install_ms" jsonschema:"how long the install took (when it was made) in milliseconds"`
	MountPath    string   `json:"mount_path" jsonschema:"where runs see the packages, read-only"`
	Env          []string `json:"env" jsonschema:"the environment runs get so that the language finds them (e.g. PYTHONPATH)"`
	SessionID    string   `json:"session_id,omitempty" jsonschema:"the session whose runs now see them"`
	Output       string   `json:"output,omitempty" jsonschema:"the package manager's output (untrusted), when it ran"`
}

// addInstallTool registers install_dependencies over in.
func addInstallTool(s *Server, in Installer, languages []string) {
	schema := runSchemaFor[InstallRequest](languages)
	schema.Properties["packages"].MinItems = Ptr(1)
	schema.Properties["packages"].MaxItems = Ptr(64)
	schema.Properties["packages"].Items.MaxLength = Ptr(200)
	schema.Properties["packages"].Items.Pattern = "^[^-\\s][^\\s]*$"
	AddTool(s, &Tool{Name: "install_dependencies", Title: "Install packages for sandboxed programs", InputSchema: schema,
		Description: "Install packages with the language's package manager (pip, npm) from the package index the server allows, " +
			"into a read-only dependency layer that later runs mount. The install runs in a sandbox whose only network is a proxy " +
			"to the allowlisted index hosts; programs themselves still have no network. The same set installed before is reused at once. " +
			"With session_id, the session's later runs in that language see the packages; otherwise give them to execute_code as dependencies.",
		Annotations: &ToolAnnotations{Title: "Install packages for sandboxed programs", ReadOnlyHint: Ptr(false), DestructiveHint: Ptr(false),
			IdempotentHint: Ptr(true), OpenWorldHint: Ptr(true)}},
		func(ctx context.Context, req *CallToolRequest, r InstallRequest) (*CallToolResult, InstallResult, error) {
			res, err := in.InstallDependencies(ctx, r)
			if err != nil {
				if ctx.Err() != nil {
					return nil, InstallResult{}, ctx.Err()
				}
				var busy *api.BusyError
				if errors.As(err, &busy) {
					return nil, InstallResult{}, busy
				}
				return nil, InstallResult{}, fmt.Errorf("install_dependencies: %v", err)
			}
			if r.SessionID != "" {
				s.sandboxes.remember(req.session(), r.SessionID)
			}
			text := fmt.Sprintf("installed %s for %s (layer %s, %d bytes", strings.Join(res.Requirements, " "), res.Language, shortKey(res.Layer), res.Bytes)
			if res.Cached {
				text += ", cached: nothing downloaded"
			}
			text += "); runs see them read-only at " + res.MountPath
			if res.SessionID != "" {
				text += " in session " + res.SessionID
			}
			return &CallToolResult{StructuredContent: res, Content: []Content{TextContent(text)}}, res, nil
		})
}

func shortKey(k string) string {
	if len(k) > 12 {
		return k[:12]
	}
	return k
}

// runSchemaFor is T's inferred schema with the language enum.
func runSchemaFor[T any](languages []string) *jsonschema.Schema {
	in, err := schemaFor[T](nil)
	if err != nil {
		panic(err)
	}
	if s := in.Properties["language"]; s != nil && len(languages) > 0 {
		for _, l := range languages {
			s.Enum = append(s.Enum, l)
		}
	}
	return in
}
