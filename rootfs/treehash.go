package rootfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"syscall"
)

// TreeHash is a deterministic digest of a directory tree: every entry's
// path, type, permission bits (setuid, setgid and sticky included), owner,
// and a regular file's contents or a symlink's target. Timestamps, inode
// numbers and hard-link structure are left out, so the same content built
// twice, or copied, hashes the same; any change a program could see (a
// byte, a mode, a new or removed file) changes it.
//
// The digest is the SHA-256 of one line per entry in lexical path order
// (fs.WalkDir's), root first:
//
//	<type> <quoted path> <mode octal> <uid>:<gid> <payload>\n
//
// where type is d (directory), f (regular file, payload "<sha256> <size>"),
// l (symlink, payload the quoted target) or o (anything else, payload the
// file type), and path is "." for the root.
//
// Owners are the ids stat(2) shows to the hashing process, so a tree
// hashes differently in a user namespace, which shows other ids: in
// rootless sandcell's (one id, the user's own, mapped to root), the user's
// files are owned by root and host root's by nobody. Content is the same
// digest without the owners, for checking from such a namespace a layer
// whose owners it cannot see.
type TreeHash struct {
	// Digest is "sha256:" and 64 hex digits.
	Digest string `json:"digest"`
	// Content is Digest's lines without the "<uid>:<gid> " field. Layers
	// built before it was recorded lack it.
	Content string `json:"content,omitempty"`
	// Bytes is the total size of the regular files (hard links counted
	// once).
	Bytes int64 `json:"bytes"`
	// Entries is the number of paths, the root included.
	Entries int64 `json:"entries"`
}

// hashTree computes dir's TreeHash. It reads through an os.Root, so no
// symlink in the tree leads it outside.
func hashTree(ctx context.Context, dir string) (TreeHash, error) {
	th, _, err := hashTreeIn(ctx, dir, currentNS(), nil)
	return th, err
}

// treeScan is what hashing a tree found besides its hash.
type treeScan struct {
	// unmapped counts the entries whose owner (user or group) the user
	// namespace does not map: their Digest line holds the overflow id, not
	// the true owner.
	unmapped int64
	// open counts the entries that group or others may write on the host.
	open int64
}

// hashTreeIn is hashTree in the user namespace ns, of the tree as built:
// an entry in built (Manifest.OpenModes, the modes of a layer's entries
// before they were closed to other host users) is hashed with its mode
// there.
func hashTreeIn(ctx context.Context, dir string, ns userNS, built map[string]string) (th TreeHash, sc treeScan, err error) {
	modes, err := parseModes(built)
	if err != nil {
		return TreeHash{}, sc, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return TreeHash{}, sc, err
	}
	defer root.Close()
	var (
		sum     = sha256.New()
		content = sha256.New()
		file    = sha256.New()
		buf     = make([]byte, 256<<10)
		seen    = map[uint64]bool{}
	)
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var uid, gid uint32
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = st.Uid, st.Gid
		}
		m := fi.Mode()
		perm := unixPerm(m)
		if openToOthers(m) {
			sc.open++
		}
		if p, ok := modes[name]; ok {
			perm = p
		}
		var kind, payload string
		switch {
		case m.IsDir():
			kind = "d"
		case m&fs.ModeSymlink != 0:
			target, err := root.Readlink(name)
			if err != nil {
				return err
			}
			kind, payload = "l", strconv.Quote(target)
		case m.IsRegular():
			f, err := root.Open(name)
			if err != nil {
				return err
			}
			file.Reset()
			n, err := io.CopyBuffer(file, f, buf)
			f.Close()
			if err != nil {
				return err
			}
			kind, payload = "f", hex.EncodeToString(file.Sum(nil))+" "+strconv.FormatInt(n, 10)
			if ino := inode(fi); ino == 0 || !seen[ino] {
				seen[ino] = true
				th.Bytes += n
			}
		default:
			kind, payload = "o", m.Type().String()
		}
		th.Entries++
		if ns.unmappedUID(uid) || ns.unmappedGID(gid) {
			sc.unmapped++
		}
		if _, err := fmt.Fprintf(sum, "%s %s %o %d:%d %s\n", kind, strconv.Quote(name), perm, uid, gid, payload); err != nil {
			return err
		}
		_, err = fmt.Fprintf(content, "%s %s %o %s\n", kind, strconv.Quote(name), perm, payload)
		return err
	})
	if err != nil {
		return TreeHash{}, sc, err
	}
	th.Digest = "sha256:" + hex.EncodeToString(sum.Sum(nil))
	th.Content = "sha256:" + hex.EncodeToString(content.Sum(nil))
	return th, sc, nil
}
