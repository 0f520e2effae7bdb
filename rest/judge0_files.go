package rest

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/sandcell/sandcell/api"
)

// Bounds of additional_files unpacked: Judge0 unzips under isolate with
// a file size limit of MAX_EXTRACT_SIZE (10240 KB); sandcell bounds the
// whole (a zip bomb inflates a few KB into gigabytes) and the count.
const (
	judge0MaxExtractBytes = judge0MaxExtractKB << 10
	judge0MaxExtractFiles = 1000
)

// additionalFiles reads additional_files: a zip, Base64-encoded whatever
// base64_encoded says (submissions_controller.rb decodes it always). Its
// files are written into /work before the run, as Judge0's `unzip -n`
// leaves them beside the source: the source file is not overwritten.
// Defended against: zip-slip (an entry named ../../etc/x or /etc/x,
// CVE-2018-1002200's class) and links (a symlink entry, then a file
// through it) are refused; a zip bomb stops at the size bound, counted on
// the bytes inflated, not on what the zip's headers claim.
func (a j0Attrs) additionalFiles() ([]byte, []api.File) {
	const name = "additional_files"
	s, given, ok := j0String(a.m[name])
	switch {
	case !ok:
		a.errs.add(name, "is not a string")
		return nil, nil
	case !given || strings.TrimSpace(s) == "":
		return nil, nil
	}
	raw, err := decodeBase64(s)
	if err != nil {
		a.errs.add(name, "is not valid Base64: %v", err)
		return nil, nil
	}
	files, err := unzipFiles(raw, judge0MaxExtractBytes, judge0MaxExtractFiles)
	if err != nil {
		a.errs.add(name, "%v", err)
		return nil, nil
	}
	return raw, files
}

// unzipFiles unpacks a zip's regular files, at most maxFiles holding at
// most maxBytes in all.
func unzipFiles(raw []byte, maxBytes int64, maxFiles int) ([]api.File, error) {
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return nil, fmt.Errorf("is not a zip archive: %v", err)
	}
	var (
		out   []api.File
		total int64
		seen  = map[string]bool{}
	)
	for _, f := range zr.File {
		mode := f.Mode()
		if mode.IsDir() {
			continue
		}
		if !mode.IsRegular() {
			return nil, fmt.Errorf("holds %q, which is not a regular file (links are refused)", f.Name)
		}
		p := path.Clean(strings.ReplaceAll(f.Name, "\\", "/"))
		if f.Name == "" || path.IsAbs(p) || p == "." || p == ".." || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("holds %q, a path outside the working directory", f.Name)
		}
		if len(out) == maxFiles {
			return nil, fmt.Errorf("holds more than %d files", maxFiles)
		}
		if seen[p] {
			continue // unzip -n: the first one stays
		}
		seen[p] = true
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("entry %q: %v", f.Name, err)
		}
		data, err := io.ReadAll(io.LimitReader(rc, maxBytes-total+1))
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("entry %q: %v", f.Name, err)
		}
		if total += int64(len(data)); total > maxBytes {
			return nil, fmt.Errorf("unpacks to more than %d KB", maxBytes>>10)
		}
		perm := mode.Perm() & 0o755
		if perm == 0 {
			perm = 0o644
		}
		out = append(out, api.File{Path: p, Data: data, Mode: perm | 0o600})
	}
	return out, nil
}

// withoutSource drops the files named as the language's source file: the
// program's own source is written first and `unzip -n` keeps it.
func withoutSource(files []api.File, source string) []api.File {
	out := files[:0:0]
	for _, f := range files {
		if f.Path != source {
			out = append(out, f)
		}
	}
	return out
}
