package api

import (
	"io/fs"
	"time"
)

// File is a file given with a run, written into /work before the program
// starts (and a compile phase's output handed to the run phase).
type File struct {
	Path string      // relative to /work; no "..", not absolute
	Data []byte      // content
	Mode fs.FileMode // permission bits; 0 means 0644
}

// FileEntry describes one entry of a session's /work (list_files,
// write_file). Path is slash-separated and relative to /work ("." for
// /work itself); Size is a file's bytes, the length of a symlink's target,
// 0 for a directory; Mode the permission bits in octal ("0644"); Target a
// symlink's target as text, never followed.
type FileEntry struct {
	Path   string    `json:"path" jsonschema:"path relative to /work"`
	Type   string    `json:"type" jsonschema:"file, dir, symlink or other"`
	Size   int64     `json:"size" jsonschema:"size in bytes"`
	Mode   string    `json:"mode" jsonschema:"permission bits, octal"`
	MTime  time.Time `json:"mtime" jsonschema:"last modification"`
	Target string    `json:"target,omitempty" jsonschema:"a symlink's target (never followed by the server)"`
}

// FileChange is an entry of a session's /work that a run created, modified
// or deleted (internal/workspace's Save finds them). Size is the new size,
// the old one when deleted.
type FileChange struct {
	Path string `json:"path" jsonschema:"path relative to /work"`
	Kind string `json:"kind" jsonschema:"created, modified or deleted"`
	Type string `json:"type" jsonschema:"file, dir or symlink"`
	Size int64  `json:"size" jsonschema:"size in bytes after the run"`
	URI  string `json:"uri,omitempty" jsonschema:"the file as an MCP resource (sandbox://SESSION/PATH)"`
}

// The kinds of a FileChange.
const (
	Created  = "created"
	Modified = "modified"
	Deleted  = "deleted"
)
