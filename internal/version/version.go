// Package version is the build's version: the release in the VERSION file
// and the commit it was built from, stamped by the Makefile
// (-ldflags -X), else read from the Go build info (a `go build` in a git
// checkout records vcs.revision), else "dev".
package version

import (
	"runtime/debug"
	"strings"
)

// Set by the Makefile: -X github.com/sandcell/sandcell/internal/version.release=0.5.0
// -X github.com/sandcell/sandcell/internal/version.commit=abc1234.
var (
	release = ""
	commit  = ""
)

// Release is the release number (VERSION), or "dev" for a build that was
// not stamped.
func Release() string {
	if release != "" {
		return release
	}
	return "dev"
}

// Commit is the commit the binary was built from (short, "-dirty" when the
// tree had changes), or "" when unknown.
func Commit() string {
	if commit != "" {
		return commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

// String is the version as serverInfo.version gives it: the release, and
// the commit as semver build metadata ("0.5.0+abc1234").
func String() string {
	c := Commit()
	if c == "" {
		return Release()
	}
	return Release() + "+" + strings.ReplaceAll(c, "-dirty", ".dirty")
}
