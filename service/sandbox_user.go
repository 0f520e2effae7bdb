package service

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// nameUser makes the sandbox's /etc/passwd and /etc/group name uid and
// gid 1000 (the default user every process runs as) sandboxUser with home
// sandboxHome, as SandboxInfo says: the layers name it "sandbox" with home
// /work (a run's user), so `whoami` said sandbox where the API says user
// (E2B's clients expect `whoami` = user). Written through the sandbox's
// root, so the change lands in its upper layer; the read-only layers stay
// as they are. Called when it starts, before any of its processes runs.
func nameUser(root *os.File, ids sandboxIDs) error {
	for _, f := range []struct {
		path string
		edit func([]byte) []byte
	}{
		{"/etc/passwd", func(b []byte) []byte {
			return renameID(b, fmt.Sprintf("%s:x:%d:%d:%s:%s:/bin/sh", sandboxUser, sandboxUID, sandboxUID, sandboxUser, sandboxHome), 2,
				func(old []string) []string {
					if len(old) == 7 { // name:x:uid:gid:gecos:home:shell: keep its shell
						return []string{sandboxUser, old[1], old[2], old[3], sandboxUser, sandboxHome, old[6]}
					}
					return nil
				})
		}},
		{"/etc/group", func(b []byte) []byte {
			return renameID(b, fmt.Sprintf("%s:x:%d:", sandboxUser, sandboxUID), 2, func(old []string) []string {
				if len(old) == 4 {
					return []string{sandboxUser, old[1], old[2], old[3]}
				}
				return nil
			})
		}},
	} {
		if err := editFile(root, f.path, ids, f.edit); err != nil {
			return err
		}
	}
	// root's home, where a process of user "root" starts (E2B's
	// `commands.run(..., {user: 'root'})`): busybox's root has none.
	if _, err := mkdirAll(root, "/root", ids.rootUID, ids.rootGID); err != nil {
		return fmt.Errorf("the sandbox's /root: %w", err)
	}
	return nil
}

// renameID rewrites the colon-separated line of b whose field idx is
// sandboxUID with edit(fields) (nil: left as it is), or appends line when
// none has it. A file that names sandboxUser already on another line is
// left as it is (two entries of one name would be worse than a wrong one).
func renameID(b []byte, line string, idx int, edit func([]string) []string) []byte {
	uid := strconv.Itoa(sandboxUID)
	lines := bytes.SplitAfter(b, []byte("\n"))
	found := false
	for i, l := range lines {
		fields := bytes.Split(bytes.TrimSuffix(l, []byte("\n")), []byte(":"))
		if len(fields) <= idx {
			continue
		}
		if string(fields[idx]) != uid {
			if string(fields[0]) == sandboxUser {
				return b
			}
			continue
		}
		found = true
		strs := make([]string, len(fields))
		for j, f := range fields {
			strs[j] = string(f)
		}
		if n := edit(strs); n != nil {
			lines[i] = []byte(joinFields(n) + "\n")
		}
	}
	out := bytes.Join(lines, nil)
	if !found {
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		out = append(out, line+"\n"...)
	}
	return out
}

func joinFields(f []string) string {
	var b bytes.Buffer
	for i, s := range f {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(s)
	}
	return b.String()
}

// editFile replaces the regular file p under root with edit(its content)
// when that differs, owned by the sandbox's root, mode 0644. A missing
// file is made.
func editFile(root *os.File, p string, ids sandboxIDs, edit func([]byte) []byte) error {
	var old []byte
	if f, err := openRegular(root, p, unix.O_RDONLY); err == nil {
		old, err = io.ReadAll(io.LimitReader(f, MaxSandboxFileBytes))
		f.Close()
		if err != nil {
			return fmt.Errorf("read the sandbox's %s: %w", p, err)
		}
	}
	b := edit(old)
	if bytes.Equal(b, old) {
		return nil
	}
	f, err := openRegular(root, p, unix.O_WRONLY|unix.O_CREAT)
	if err != nil {
		return fmt.Errorf("the sandbox's %s: %w", p, err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := unix.Ftruncate(fd, 0); err != nil {
		return fmt.Errorf("truncate the sandbox's %s: %w", p, err)
	}
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("write the sandbox's %s: %w", p, err)
	}
	if err := unix.Fchown(fd, int(ids.rootUID), int(ids.rootGID)); err != nil {
		return fmt.Errorf("chown the sandbox's %s: %w", p, err)
	}
	return nil
}
