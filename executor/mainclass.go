package executor

import (
	"path"
	"slices"
	"strings"
	"unicode"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/rootfs"
)

// A language whose program is a class (rootfs.Language.MainClass: Java)
// runs the class of the program that declares main, whatever its name:
// the catalogue's run names the source's stem (Main), but a program may
// hold class Solution, or public class HelloWorld (Piston's own
// test.java), which javac accepts only from HelloWorld.java. The program
// is read here, at plan time, as far as its top-level declarations: no
// sandbox is needed to tell its class.

// maxClassName bounds a public class's name that names a file: a name
// is at most 255 bytes, and the program is the caller's (a class name of
// a megabyte, not UTF-8, would make /work's file fail to be written, or
// its listing).
const maxClassName = 200

// programMain is the class to run of a program: the one of the program's
// own file that declares main, else the first of its fellow sources' (a
// program whose main is in another file: Piston's CLI sends the file it
// was given last); "" if none does.
func programMain(lang rootfs.Language, program string, files []api.File) string {
	var fellows []api.File
	for _, f := range files {
		switch name := path.Clean(f.Path); {
		case name == path.Clean(program):
			if _, main := mainClass(f.Data); main != "" {
				return main
			}
		case fellowSource(lang, program, name):
			fellows = append(fellows, f)
		}
	}
	for _, f := range fellows {
		if _, main := mainClass(f.Data); main != "" {
			return main
		}
	}
	return ""
}

// mainClass is what a Java program's text declares at the top level: its
// public class (javac names the file after it), the first class that
// declares static void main, qualified by the package (java runs it).
// Empty where there is none. Comments, strings and character literals
// are skipped, so that a class mentioned in them does not count.
func mainClass(src []byte) (public, main string) {
	var pkg string
	var stmt []string // the tokens since the last ; { or } at this depth
	depth, top := 0, ""
	for _, tok := range javaTokens(string(src)) {
		switch tok {
		case "{":
			if depth == 0 {
				top = ""
				if k := declIndex(stmt); k >= 0 && k+1 < len(stmt) {
					top = stmt[k+1]
					if public == "" && slices.Contains(stmt[:k], "public") {
						public = top
					}
				}
			}
			depth++
			stmt = stmt[:0]
		case "}":
			depth = max(0, depth-1)
			stmt = stmt[:0]
		case ";":
			if depth == 0 && len(stmt) >= 2 && stmt[0] == "package" {
				pkg = strings.Join(stmt[1:], "")
			}
			stmt = stmt[:0]
		case "(":
			n := len(stmt)
			if depth == 1 && main == "" && top != "" && n >= 3 && stmt[n-1] == "main" && stmt[n-2] == "void" && slices.Contains(stmt, "static") {
				main = top
			}
			stmt = append(stmt, tok)
		default:
			stmt = append(stmt, tok)
		}
	}
	if main != "" && pkg != "" {
		main = pkg + "." + main
	}
	return public, main
}

// declIndex is the index of the keyword of a type declaration in a
// statement's tokens (class, interface, enum, record), or -1.
func declIndex(stmt []string) int {
	for i, t := range stmt {
		switch t {
		case "class", "interface", "enum", "record":
			return i
		}
	}
	return -1
}

// javaTokens splits Java source into identifiers (and keywords, numbers)
// and single punctuation characters, dropping white space, comments,
// string literals (text blocks included) and character literals.
func javaTokens(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case strings.HasPrefix(s[i:], "//"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return out
			}
			i += j + 1
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return out
			}
			i += j + 4
		case strings.HasPrefix(s[i:], `"""`):
			j := strings.Index(s[i+3:], `"""`)
			if j < 0 {
				return out
			}
			i += j + 6
		case c == '"' || c == '\'':
			i++
			for i < len(s) && s[i] != c && s[i] != '\n' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case c == '_' || c == '$' || c >= 0x80 || unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c)):
			j := i
			for j < len(s) && (s[j] == '_' || s[j] == '$' || s[j] >= 0x80 || unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j]))) {
				j++
			}
			out = append(out, s[i:j])
			i = j
		case unicode.IsSpace(rune(c)):
			i++
		default:
			out = append(out, s[i:i+1])
			i++
		}
	}
	return out
}
