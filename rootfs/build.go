package rootfs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// listHook is an mmdebstrap --extract-hook. It runs on the host after the
// packages are extracted and before mmdebstrap deletes the downloaded .debs,
// and writes one "name TAB version TAB arch" line per package to the file
// named by $SANDCELL_PACKAGE_LIST. (The extract variant installs nothing, so
// the layer's dpkg status database stays empty and cannot be asked.)
const listHook = `set -e; for f in "$1"/var/cache/apt/archives/*.deb; do ` +
	`dpkg-deb --show --showformat='${Package}\t${Version}\t${Architecture}\n' "$f"; ` +
	`done > "$SANDCELL_PACKAGE_LIST"`

// setupEnv is the whole environment of a setup step.
var setupEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LC_ALL=C",
	"HOME=/",
}

// build extracts lang's packages into tmp/root with mmdebstrap, runs the
// setup steps in it, and finishes it into a layer.
func (s *Store) build(ctx context.Context, lang Language, tmp string) (Manifest, error) {
	mmdebstrap, err := exec.LookPath("mmdebstrap")
	if err != nil {
		return Manifest{}, fmt.Errorf("%w (install it: apt-get install mmdebstrap)", err)
	}
	root := filepath.Join(tmp, "root")
	list := filepath.Join(tmp, "packages.tsv")

	args := []string{
		"--mode=root",
		"--variant=extract",
		"--format=directory",
		"--include=" + strings.Join(lang.Packages, ","),
		"--extract-hook=" + listHook,
		"--",
		cat.Suite,
		root,
	}
	cmd := exec.CommandContext(ctx, mmdebstrap, append(args, s.Mirrors...)...)
	cmd.Env = append(os.Environ(), "SANDCELL_PACKAGE_LIST="+list)
	t0 := time.Now()
	if err := s.run(ctx, cmd); err != nil {
		return Manifest{}, fmt.Errorf("mmdebstrap: %w", err)
	}
	s.log().Debug("extracted packages", "language", lang.Name, "duration", time.Since(t0).Round(time.Millisecond))

	data, err := os.ReadFile(list)
	if err != nil {
		return Manifest{}, fmt.Errorf("package list: %w", err)
	}
	pkgs, err := parsePackages(data)
	if err != nil {
		return Manifest{}, fmt.Errorf("package list: %w", err)
	}
	if err := os.Remove(list); err != nil {
		return Manifest{}, err
	}

	for _, argv := range lang.Setup {
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = setupEnv
		cmd.Dir = "/"
		// The layer's own programs run against the layer's own libraries.
		// Paths resolve inside the chroot, so no symlink in the layer can
		// lead a step's writes onto the host.
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		if err := s.run(ctx, cmd); err != nil {
			return Manifest{}, fmt.Errorf("setup step %q: %w", argv, err)
		}
		s.log().Debug("ran setup step", "language", lang.Name, "argv", argv, "duration", time.Since(t0).Round(time.Millisecond))
	}

	size, err := finish(root)
	if err != nil {
		return Manifest{}, fmt.Errorf("finish layer: %w", err)
	}
	m := Manifest{
		Format:   manifestFormat,
		Language: lang.Name,
		Suite:    cat.Suite,
		Packages: pkgs,
		Setup:    lang.Setup,
		Bytes:    size,
	}
	m.ID = layerID(m)
	return m, nil
}

// run runs cmd in its own process group, which is sent SIGTERM when ctx is
// done (mmdebstrap cleans up on SIGTERM) and SIGKILL 10 s later. The error
// carries the tail of the command's output; with a done ctx it wraps
// ctx.Err().
func (s *Store) run(ctx context.Context, cmd *exec.Cmd) error {
	out := &tailBuffer{max: 8 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil && cmd.Process != nil {
		// Children that outlived the group leader, e.g. apt under mmdebstrap.
		_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
	s.log().Debug("command output", "argv", cmd.Args, "output", out.String())
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	n, _ := b.Buffer.Write(p)
	if extra := b.Len() - b.max; extra > 0 {
		b.Next(extra)
	}
	return n, nil
}

// parsePackages parses listHook's output, sorted by package name.
func parsePackages(data []byte) ([]Package, error) {
	var pkgs []Package
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 || f[0] == "" || f[1] == "" || f[2] == "" {
			return nil, fmt.Errorf("malformed line %q", sc.Text())
		}
		pkgs = append(pkgs, Package{Name: f[0], Version: f[1], Arch: f[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		return nil, errors.New("no packages")
	}
	slices.SortFunc(pkgs, func(a, b Package) int { return strings.Compare(a.Name, b.Name) })
	return pkgs, nil
}

// layerID hashes what determines a layer's content: the recipe version,
// suite, resolved packages and setup steps. Not the language name, the
// build time or the size.
func layerID(m Manifest) string {
	data, err := json.Marshal(struct {
		Format   int        `json:"format"`
		Suite    string     `json:"suite"`
		Packages []Package  `json:"packages"`
		Setup    [][]string `json:"setup"`
	}{m.Format, m.Suite, m.Packages, m.Setup})
	if err != nil {
		panic(err) // cannot happen: plain strings and ints
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// syncfs flushes the file system holding dir to disk.
func syncfs(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// lockWait takes an exclusive flock(2) on path, creating it, and polls until
// it gets it or ctx is done. waiting is called once if it has to wait.
func lockWait(ctx context.Context, path string, waiting func()) (unlock func(), err error) {
	for first := true; ; first = false {
		unlock, ok, err := tryLock(path)
		if err != nil || ok {
			return unlock, err
		}
		if first {
			waiting()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tryLock takes an exclusive flock(2) on path, creating it, without waiting.
// The lock is released by unlock or when the process dies, so a killed
// build never leaves a stale lock.
func tryLock(path string) (unlock func(), ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("flock %s: %w", path, err)
	}
	return func() { f.Close() }, true, nil
}

// removeTree removes dir and everything in it, but refuses if anything is
// mounted at or below dir: os.RemoveAll crosses mount points, and a build
// killed mid-way could leave, say, the host's /dev or /proc mounted in its
// tree, whose files would then be deleted.
func removeTree(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("refusing to remove %s: cannot list mounts: %w", dir, err)
	}
	for line := range strings.Lines(string(mounts)) {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			return fmt.Errorf("refusing to remove %s: %s is mounted", dir, mp)
		}
	}
	return os.RemoveAll(dir)
}

// unescapeMountinfo undoes the kernel's octal escaping (\040 for a space)
// of paths in /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
