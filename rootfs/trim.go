package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
)

// Trim patterns name paths removed from a package layer: documentation,
// manual pages, translations, test suites. A pattern is a slash-separated
// path relative to the layer's root whose elements are path.Match patterns
// or "**", which matches any number of elements (also none). A pattern
// starting with "!" keeps what it matches; the last pattern matching a path
// decides. Files and symlinks are removed when trimmed; a trimmed directory
// is removed once nothing in it is left.
//
//	usr/share/doc/**               everything below usr/share/doc
//	!usr/share/doc/*/copyright     but the licences
//	usr/share/go-1.19/src/**/*_test.go

// checkPattern reports a malformed trim pattern.
func checkPattern(p string) error {
	body := strings.TrimPrefix(p, "!")
	if !validLayerPath(body) {
		return fmt.Errorf("trim pattern %q: must be a clean path relative to the layer's root", p)
	}
	for _, elem := range strings.Split(body, "/") {
		if _, err := path.Match(elem, ""); err != nil {
			return fmt.Errorf("trim pattern %q: %w", p, err)
		}
	}
	return nil
}

// trimmed reports whether name (slash-separated, relative) is removed by
// patterns.
func trimmed(patterns []string, name string) bool {
	elems := strings.Split(name, "/")
	out := false
	for _, p := range patterns {
		keep := strings.HasPrefix(p, "!")
		if matchElems(strings.Split(strings.TrimPrefix(p, "!"), "/"), elems) {
			out = !keep
		}
	}
	return out
}

// matchElems matches path elements against pattern elements, "**" matching
// any number of elements.
func matchElems(pat, elems []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(elems); i++ {
				if matchElems(pat[1:], elems[i:]) {
					return true
				}
			}
			return false
		}
		if len(elems) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], elems[0]); !ok {
			return false
		}
		pat, elems = pat[1:], elems[1:]
	}
	return len(elems) == 0
}

// trimTree removes from root what patterns trim. It returns the number of
// paths removed.
func trimTree(root *os.Root, patterns []string) (int, error) {
	if len(patterns) == 0 {
		return 0, nil
	}
	var dirs []string
	removed := 0
	err := fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." {
			return err
		}
		if d.IsDir() {
			if trimmed(patterns, name) {
				dirs = append(dirs, name)
			}
			return nil
		}
		if !trimmed(patterns, name) {
			return nil
		}
		removed++
		return root.Remove(name)
	})
	if err != nil {
		return removed, err
	}
	// Deepest first, so a directory's trimmed subdirectories go before it.
	slices.Reverse(dirs)
	for _, d := range dirs {
		err := root.Remove(d)
		switch {
		case err == nil:
			removed++
		case errors.Is(err, fs.ErrNotExist), isNotEmpty(err):
		default:
			return removed, err
		}
	}
	return removed, nil
}

func isNotEmpty(err error) bool {
	return errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)
}
