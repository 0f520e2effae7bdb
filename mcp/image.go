package mcp

import (
	"context"
	"time"
)

// Images is what a Sandbox that runs in imported OCI images (sandcell
// image import) also offers; the tools use it when the Sandbox has it.
// The run tools' image argument is passed on in api.Request.Image either
// way (a Sandbox without images refuses it).
type Images interface {
	// Images lists the imported images, for list_languages.
	Images(ctx context.Context) ([]ImageInfo, error)
	// CreateImageSession is CreateSession for a session whose runs get
	// the image's root filesystem unless they name another.
	CreateImageSession(ctx context.Context, language, image string, ttl time.Duration) (SessionInfo, error)
}

// ImageInfo is one imported image of list_languages.
type ImageInfo struct {
	Name   string   `json:"name" jsonschema:"the name to pass as image"`
	Layers int      `json:"layers" jsonschema:"its layer count"`
	Bytes  int64    `json:"bytes" jsonschema:"its unpacked size"`
	Env    []string `json:"env,omitempty" jsonschema:"its environment (PATH...), set before the language's"`
	// Entrypoint and Cmd run when run_command is given the image and no
	// command.
	Entrypoint []string `json:"entrypoint,omitempty" jsonschema:"what run_command runs in it without a command, followed by cmd"`
	Cmd        []string `json:"cmd,omitempty" jsonschema:"the default arguments of entrypoint"`
}
