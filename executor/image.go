package executor

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/rootfs"
)

// imageRun is a request in an imported image: its mounted root and what
// the image's config gives the run. The image changes the root filesystem
// and the program's environment, nothing else: the limits, seccomp
// filter, namespaces, network mode and sandbox user are those of a run in
// a language's root.
type imageRun struct {
	img  rootfs.Image
	root string
}

// openImage mounts the root of the request's image: the one it names,
// else the one its catalogue language names as its root (nil: neither,
// a run in the language's own layers).
func (e *Executor) openImage(req Request, lang rootfs.Language) (*imageRun, error) {
	name := req.Image
	if name == "" {
		name = lang.Image
	}
	if name == "" {
		return nil, nil
	}
	if len(req.Dependencies) > 0 {
		return nil, fmt.Errorf("%w %s: dependencies are installed into language layers, not images: put the packages in the image", ErrImage, name)
	}
	root, img, err := e.store.ImageRoot(name)
	if err != nil {
		return nil, err
	}
	return &imageRun{img: img, root: root}, nil
}

// ownProgram reports whether req runs the image's own Entrypoint and Cmd:
// it names an image and no language, script or command.
func ownProgram(req api.Request) bool {
	return req.Image != "" && req.Language == "" && req.Script == "" && req.Command == nil
}

// entrypoint is the argv of the image's own program, as docker runs it:
// Entrypoint followed by args, or by Cmd when args is empty.
func (r *imageRun) entrypoint(args []string) ([]string, error) {
	c := r.img.Config
	argv := slices.Clone(c.Entrypoint)
	if len(args) > 0 {
		argv = append(argv, args...)
	} else {
		argv = append(argv, c.Cmd...)
	}
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("%w %s: it has no Entrypoint or Cmd: give a language and a program, or a command", ErrImage, r.img.Name)
	}
	return argv, nil
}

// checkOwn refuses a run of the image's own program (argv, resolved) when
// the image lacks what its config names: the WorkingDir, or the program
// of its Entrypoint or Cmd (or the request's, in Cmd's place). The image
// is at fault, not sandcell, so the request is refused naming the path
// before a sandbox starts, where runc's chdir or exec would fail as an
// internal error (issue #37). A program without a slash is looked up on
// the image's PATH, one with a slash in the WorkingDir, as execvp does.
func (r *imageRun) checkOwn(argv, args []string) error {
	c := r.img.Config
	wd := cmp.Or(c.WorkingDir, "/")
	if !path.IsAbs(wd) {
		return fmt.Errorf("%w %s: its WorkingDir %q is not an absolute path", ErrImage, r.img.Name, wd)
	}
	if mp := rootfs.BelowMountpoint(wd); mp != "" {
		return fmt.Errorf("%w %s: its WorkingDir %q is below %s, which every run mounts afresh (the image's files there are not seen)",
			ErrImage, r.img.Name, wd, mp)
	}
	if !r.isDir(wd) {
		hint := ""
		if _, err := r.stat(wd); errors.Is(err, fs.ErrNotExist) {
			hint = " (sandcell makes a missing WorkingDir when it imports an image, as docker does when it starts one: import it again)"
		}
		return fmt.Errorf("%w %s: its WorkingDir %q is not a directory in the image%s", ErrImage, r.img.Name, c.WorkingDir, hint)
	}
	whose := "its Cmd's program"
	switch {
	case len(c.Entrypoint) > 0:
		whose = "its Entrypoint's program"
	case len(args) > 0:
		whose = "the program"
	}
	prog := argv[0]
	switch {
	case path.IsAbs(prog):
		if !r.executable(prog) {
			return fmt.Errorf("%w %s: %s %q is not an executable file in the image", ErrImage, r.img.Name, whose, prog)
		}
	case strings.Contains(prog, "/"):
		if !r.executable(path.Join(wd, prog)) {
			return fmt.Errorf("%w %s: %s %q is not an executable file in the image (resolved in its WorkingDir %s)", ErrImage, r.img.Name, whose, prog, wd)
		}
	case r.lookPath(prog) == "":
		return fmt.Errorf("%w %s: %s %q is not an executable file on the image's PATH (%s)", ErrImage, r.img.Name, whose, prog, r.path())
	}
	return nil
}

// env is the image's environment (without HOME: it stays /work).
func (r *imageRun) env() []string { return slices.Clone(r.img.Config.Env) }

// path is the image's PATH, or the sandbox's default when it sets none.
func (r *imageRun) path() string {
	for _, kv := range r.img.Config.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			return v
		}
	}
	return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
}

// resolve finds argv's program in the image (nil: no image, argv as it is): an absolute program the image
// has is kept, one it lacks is looked up by its base name on the image's
// PATH (a catalogue language runs /usr/bin/python3; the python images
// have /usr/local/bin/python3). A name that is nowhere is kept as it is:
// the run then fails to start and says so. Paths resolve with symlinks
// taken relative to the image's root (securejoin), never onto the host;
// the image is read-only, and runc resolves the program again inside the
// sandbox.
func (r *imageRun) resolve(argv []string) []string {
	if r == nil || len(argv) == 0 || !path.IsAbs(argv[0]) || r.executable(argv[0]) {
		return argv
	}
	if p := r.lookPath(path.Base(argv[0])); p != "" {
		out := slices.Clone(argv)
		out[0] = p
		return out
	}
	return argv
}

// lookPath is the executable file name on the image's PATH ("": none).
func (r *imageRun) lookPath(name string) string {
	for dir := range strings.SplitSeq(r.path(), ":") {
		if !path.IsAbs(dir) {
			continue
		}
		if p := path.Join(dir, name); r.executable(p) {
			return p
		}
	}
	return ""
}

// hostPath stats the image's p, symlinks resolved within the image's
// root (securejoin), never onto the host.
func (r *imageRun) stat(p string) (fs.FileInfo, error) {
	host, err := securejoin.SecureJoin(r.root, p)
	if err != nil {
		return nil, err
	}
	return os.Stat(host)
}

// executable reports whether p is an executable regular file of the image.
func (r *imageRun) executable(p string) bool {
	fi, err := r.stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// isDir reports whether p is a directory of the image.
func (r *imageRun) isDir(p string) bool {
	fi, err := r.stat(p)
	return err == nil && fi.IsDir()
}
