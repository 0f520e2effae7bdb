package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// A config file is TOML whose keys are the flags' names: `state-dir =
// "/run/sandcell"`, `max-runs = 4`, `pool-size = 4`, `allow-origin =
// ["https://a.example"]`, a table for a LANG=VALUE flag (`[deps-index]
// python = "https://mirror/simple"`). Every global flag and every flag of
// `serve` has a key (`sandcell config show` prints them all); a flag given
// on the command line wins over the file. Applying a key is setting its
// flag, so a file and the same flags give the same configuration by
// construction (TestFileEqualsFlags checks every option).

// maxFileBytes caps a config file (it is read whole).
const maxFileBytes = 1 << 20

// File is a parsed config file.
type File struct {
	Path   string
	values map[string]any
	lines  map[string]int // key -> the line that sets it
}

// LineError is a problem at a line of a config file.
type LineError struct {
	Path string
	Line int // 0: unknown
	Key  string
	Err  error
}

func (e *LineError) Error() string {
	where := e.Path
	if e.Line > 0 {
		where += ":" + strconv.Itoa(e.Line)
	}
	if e.Key != "" {
		return fmt.Sprintf("%s: %s: %v", where, e.Key, e.Err)
	}
	return fmt.Sprintf("%s: %v", where, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// ReadFile reads and parses a config file. A syntax error is a LineError
// with its line.
func ReadFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileBytes {
		return nil, &LineError{Path: path, Err: fmt.Errorf("larger than %d bytes", maxFileBytes)}
	}
	return parseFile(path, data)
}

func parseFile(path string, data []byte) (*File, error) {
	var values map[string]any
	if err := toml.Unmarshal(data, &values); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, _ := de.Position()
			return nil, &LineError{Path: path, Line: line, Err: errors.New(de.Error())}
		}
		return nil, &LineError{Path: path, Err: err}
	}
	f := &File{Path: path, values: values, lines: map[string]int{}}
	for k := range values {
		f.lines[k] = keyLine(data, k)
	}
	return f, nil
}

// keyLine is the line where key is set: `key =`, `"key" =` or `[key]`.
func keyLine(data []byte, key string) int {
	q := regexp.QuoteMeta(key)
	re := regexp.MustCompile(`^\s*(?:(?:"` + q + `"|'` + q + `'|` + q + `)\s*=|\[\s*(?:"` + q + `"|` + q + `)\s*\])`)
	for i, line := range bytes.Split(data, []byte("\n")) {
		if re.Match(line) {
			return i + 1
		}
	}
	return 0
}

// Keys are the file's keys, sorted.
func (f *File) Keys() []string { return slices.Sorted(maps.Keys(f.values)) }

// Apply sets, for each of the file's keys that names a flag of one of
// sets, that flag, unless explicit(flag) says the command line set it.
// Keys that name no flag of known (the flag sets a file may configure, sets
// among them) are errors; so are values their flag refuses. Every error
// names the line and the key.
func (f *File) Apply(sets []*flag.FlagSet, known []*flag.FlagSet, explicit func(name string) bool) error {
	var errs []error
	for _, key := range f.Keys() {
		fl, known := lookup(key, sets), lookup(key, known)
		if known == nil {
			errs = append(errs, &LineError{Path: f.Path, Line: f.lines[key], Key: key, Err: errors.New("not a setting (see `sandcell config show` for the keys)")})
			continue
		}
		if fl == nil || (explicit != nil && explicit(key)) || deprecated(fl) {
			continue
		}
		vals, err := flagValues(f.values[key])
		if err == nil {
			for _, v := range vals {
				if err = fl.Value.Set(v); err != nil {
					break
				}
			}
		}
		if err != nil {
			errs = append(errs, &LineError{Path: f.Path, Line: f.lines[key], Key: key, Err: err})
		}
	}
	return errors.Join(errs...)
}

func lookup(name string, sets []*flag.FlagSet) *flag.Flag {
	for _, fs := range sets {
		if f := fs.Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

// deprecated flags (--layer-dir) are aliases: not settings of their own.
func deprecated(f *flag.Flag) bool { return strings.Contains(f.Usage, "(deprecated)") }

// flagValues turns a TOML value into the strings its flag is set with,
// once each: an array sets a repeatable flag once per element, a table a
// KEY=VALUE flag once per key (and per element of an array value).
func flagValues(v any) ([]string, error) {
	switch v := v.(type) {
	case []any:
		var out []string
		for _, e := range v {
			s, err := scalar(e)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	case map[string]any:
		var out []string
		for _, k := range slices.Sorted(maps.Keys(v)) {
			vals, err := flagValues(v[k])
			if err != nil {
				return nil, err
			}
			if _, nested := v[k].(map[string]any); nested {
				return nil, fmt.Errorf("%s: a table within a table is not a setting", k)
			}
			for _, s := range vals {
				out = append(out, k+"="+s)
			}
		}
		return out, nil
	}
	s, err := scalar(v)
	return []string{s}, err
}

func scalar(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	}
	return "", fmt.Errorf("%T is not a value of a setting (give a string, number, boolean, array or table)", v)
}

// Show writes the effective settings of sets as a config file that
// ReadFile reads back: every setting, sorted, deprecated aliases left out.
func Show(w io.Writer, sets ...*flag.FlagSet) error {
	m := map[string]any{}
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			if deprecated(f) || f.Name == "config" || f.Name == "version" {
				return
			}
			var v any = f.Value.String()
			if g, ok := f.Value.(flag.Getter); ok {
				v = g.Get()
			}
			if d, ok := v.(time.Duration); ok {
				v = d.String()
			}
			m[f.Name] = v
		})
	}
	b, err := toml.Marshal(m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
