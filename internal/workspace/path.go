package workspace

import (
	"fmt"
	"strconv"
	"strings"
)

const (
	// MaxPath bounds a path relative to /work, in bytes: PATH_MAX less its
	// NUL byte. Save refuses a tree holding a longer path (tmpfs allows
	// them, through relative paths), and the file tools refuse one.
	MaxPath = 4095

	// MaxName is NAME_MAX, the longest name tmpfs and ext4 accept.
	MaxName = 255

	// workMount is where the workspace appears inside the container.
	// Clients may name files as the program sees them, /work/a.txt.
	workMount = "/work"
)

// cleanPath validates a path a client sent and returns it relative to the
// workspace root: slash-separated, without "." or empty components; ""
// is the root. It accepts "/work" and absolute paths beneath it, the
// names the program itself uses. It rejects ".." instead of cleaning it
// away: "a/../b" is refused rather than quietly meaning "b", so a path
// never names anything but what it spells.
//
// cleanPath only checks the spelling; resolve opens the result without
// following any link.
func cleanPath(unsafePath string) (string, error) {
	if len(unsafePath) > len(workMount)+1+MaxPath {
		return "", fmt.Errorf("%w: path %s is longer than %d bytes", ErrInvalid, short(unsafePath), MaxPath)
	}
	if strings.IndexByte(unsafePath, 0) >= 0 {
		return "", fmt.Errorf("%w: path %s holds a NUL byte", ErrInvalid, short(unsafePath))
	}
	p := unsafePath
	if strings.HasPrefix(p, "/") {
		switch {
		case p == workMount:
			p = ""
		case strings.HasPrefix(p, workMount+"/"):
			p = p[len(workMount)+1:]
		default:
			return "", fmt.Errorf("%w: path %s is absolute but not under %s", ErrInvalid, short(unsafePath), workMount)
		}
	}
	var comps []string
	for c := range strings.SplitSeq(p, "/") {
		switch {
		case c == "" || c == ".":
			continue
		case c == "..":
			return "", fmt.Errorf("%w: path %s holds \"..\"", ErrInvalid, short(unsafePath))
		case len(c) > MaxName:
			return "", fmt.Errorf("%w: path %s has a name longer than %d bytes", ErrInvalid, short(unsafePath), MaxName)
		}
		comps = append(comps, c)
	}
	clean := strings.Join(comps, "/")
	if len(clean) > MaxPath {
		return "", fmt.Errorf("%w: path %s is longer than %d bytes", ErrInvalid, short(unsafePath), MaxPath)
	}
	return clean, nil
}

// splitPath splits a clean, non-root path into its directory ("." for
// the root) and its last name.
func splitPath(p string) (dir, name string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ".", p
	}
	return p[:i], p[i+1:]
}

// joinPath appends name to the relative path dir ("" is the root).
func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// short quotes a path for an error message or a log line, cut to 128
// bytes: paths come from the sandbox and may be 4 KiB of anything.
func short(p string) string {
	const keep = 128
	if len(p) > keep {
		return strconv.Quote(p[:keep]) + "..."
	}
	return strconv.Quote(p)
}

// display shows a path in a confirmation prompt: as it is when that is
// unambiguous, quoted when it holds a space or anything strconv.Quote
// escapes (a newline, a control or bidirectional-override character, a
// quote), so a hostile name cannot forge the rest of the prompt. Never
// cut: the prompt must show what will be deleted.
func display(p string) string {
	if q := strconv.Quote(p); q[1:len(q)-1] != p || strings.ContainsAny(p, " \t") {
		return q
	}
	return p
}
