package rest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
)

// The request of /run_code, checked as pydantic checks SandboxFusion's
// RunCodeRequest model (sandbox/server/sandbox_api.py) and refused in
// FastAPI's words: a 422 whose detail lists every error at once.

// fusionIssue is one pydantic error of a 422's detail list.
type fusionIssue struct {
	Type  string         `json:"type"`
	Loc   []any          `json:"loc"`
	Msg   string         `json:"msg"`
	Input any            `json:"input"`
	Ctx   map[string]any `json:"ctx,omitempty"`
	URL   string         `json:"url,omitempty"`
}

// fusionInvalid collects a request's pydantic errors.
type fusionInvalid []fusionIssue

func (v *fusionInvalid) add(typ string, loc []any, msg string, input any, ctx map[string]any) {
	url := pydanticURL + typ
	if typ == "json_invalid" {
		url = "" // FastAPI's own error, not pydantic's
	}
	*v = append(*v, fusionIssue{Type: typ, Loc: append([]any{"body"}, loc...), Msg: msg, Input: input, Ctx: ctx, URL: url})
}

// fusionParse checks the body as pydantic checks RunCodeRequest: every
// field's type (lax mode: "10" is a number), the language literal, the
// required code and language. It returns the body's fields or the 422's
// issues, all of them.
func fusionParse(body []byte) (m map[string]any, issues fusionInvalid) {
	var raw any
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		var off int64
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = se.Offset
		} else if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			off = int64(len(body))
		}
		issues.add("json_invalid", []any{off}, "JSON decode error", map[string]any{}, map[string]any{"error": err.Error()})
		return nil, issues
	}
	m, ok := raw.(map[string]any)
	if !ok {
		issues.add("model_attributes_type", nil, "Input should be a valid dictionary or object to extract fields from", raw, nil)
		return nil, issues
	}
	for _, f := range []string{"compile_timeout", "run_timeout"} {
		if v, ok := m[f]; ok {
			if n, ok := laxFloat(v, &issues, f); ok && n <= 0 {
				issues.add("greater_than", []any{f}, "Input should be greater than 0", v, map[string]any{"gt": 0})
			}
		}
	}
	if v, ok := m["memory_limit_MB"]; ok {
		laxInt(v, &issues, "memory_limit_MB")
	}
	if v, ok := m["code"]; !ok {
		issues.add("missing", []any{"code"}, "Field required", m, nil)
	} else if _, ok := v.(string); !ok {
		issues.add("string_type", []any{"code"}, "Input should be a valid string", v, nil)
	}
	if v, ok := m["stdin"]; ok && v != nil {
		if _, ok := v.(string); !ok {
			issues.add("string_type", []any{"stdin"}, "Input should be a valid string", v, nil)
		}
	}
	if v, ok := m["language"]; !ok {
		issues.add("missing", []any{"language"}, "Field required", m, nil)
	} else if s, ok := v.(string); !ok || !slices.Contains(fusionLanguages, s) {
		quoted := make([]string, len(fusionLanguages))
		for i, l := range fusionLanguages {
			quoted[i] = "'" + l + "'"
		}
		expected := strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1]
		issues.add("literal_error", []any{"language"}, "Input should be "+expected, v, map[string]any{"expected": expected})
	}
	if v, ok := m["files"]; ok {
		if files, ok := v.(map[string]any); !ok {
			issues.add("dict_type", []any{"files"}, "Input should be a valid dictionary", v, nil)
		} else {
			for _, name := range slices.Sorted(maps.Keys(files)) {
				if c := files[name]; c != nil {
					if _, ok := c.(string); !ok {
						issues.add("string_type", []any{"files", name}, "Input should be a valid string", c, nil)
					}
				}
			}
		}
	}
	if v, ok := m["fetch_files"]; ok {
		if list, ok := v.([]any); !ok {
			issues.add("list_type", []any{"fetch_files"}, "Input should be a valid list", v, nil)
		} else {
			for i, p := range list {
				if _, ok := p.(string); !ok {
					issues.add("string_type", []any{"fetch_files", i}, "Input should be a valid string", p, nil)
				}
			}
		}
	}
	return m, issues
}

// laxFloat reads a float as pydantic's lax mode does: a number, or a
// string of one.
func laxFloat(v any, issues *fusionInvalid, field string) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			issues.add("float_parsing", []any{field}, "Input should be a valid number, unable to parse string as a number", v, nil)
			return 0, false
		}
		return f, true
	}
	issues.add("float_type", []any{field}, "Input should be a valid number", v, nil)
	return 0, false
}

// laxInt reads an int as pydantic's lax mode does: an integer, a float
// without a fraction, or a string of an integer.
func laxInt(v any, issues *fusionInvalid, field string) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, true
		}
		f, err := x.Float64()
		if err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f), true
		}
		issues.add("int_from_float", []any{field}, "Input should be a valid integer, got a number with a fractional part", v, nil)
		return 0, false
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			issues.add("int_parsing", []any{field}, "Input should be a valid integer, unable to parse string as an integer", v, nil)
			return 0, false
		}
		return n, true
	}
	issues.add("int_type", []any{field}, "Input should be a valid integer", v, nil)
	return 0, false
}

// fusionPath cleans a path of files or fetch_files: relative to the
// working directory, or absolute below it; nothing that leaves it.
func fusionPath(name string) (string, error) {
	if path.IsAbs(name) {
		rel, ok := strings.CutPrefix(path.Clean(name), fusionWork+"/")
		if !ok {
			return "", fmt.Errorf("path %q is outside the working directory %s", name, fusionWork)
		}
		name = rel
	}
	return workPath(name)
}
