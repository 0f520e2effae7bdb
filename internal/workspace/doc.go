// Package workspace keeps sessions' persistent /work directories on disk
// and performs every host-side file operation on them.
//
// Invariant: no operation follows a link, or otherwise leaves a
// workspace's tree, whatever the sandbox put in it.
//
// # Design
//
// A session is a persistent /work for an agent, but every run in it is
// still a fresh container with a fresh size-capped tmpfs /work: programs
// never see the store. Before a run, Session.Fill copies the session's
// tree into the run's tmpfs; after the program is dead, Session.Save
// copies the tmpfs back. The file tools (Session.List, Stat, Read, Write,
// Delete, Describe) work on the copy on disk. Runs and writes of one
// session are serialised by Session.Lock.
//
// Save never edits the tree in place: it copies /work into a new tree
// beside the current one and swaps the two with renameat2
// RENAME_EXCHANGE, then removes the old one. A kill -9 at any moment
// leaves the old tree or the new one whole, and Open removes the other
// (and any other leftover: see Store). A Save refused for its size leaves
// the old tree as it was. (Durability across a power loss is the
// filesystem's: the trees are not fsynced, meta.json is.)
//
// # Quota
//
// A session's quota bounds what its tree costs the host's disk, in bytes
// and in inodes (issue #17: counted as file data only, a 256 MiB session
// held 96k inodes and 377 MiB of disk). Every entry costs a page (4 KiB)
// and its name (an ext4 directory entry: 8 bytes and the name rounded up
// to 4): the page is a directory's first block, a long symlink's block,
// the first data page of a file, and for an empty file or a short symlink
// its inode, counted as a page so that a quota of Q bytes holds at most
// Q/4 KiB entries. A regular file's further data extents (found with
// SEEK_DATA and SEEK_HOLE, so holes are free on either side) count in
// whole pages. The bytes a tree is charged so bound the blocks it takes,
// directories and symlinks included, on a filesystem with blocks of 4 KiB
// or less, and a tmpfs /work of Quota bytes always holds it (tmpfs charges
// data pages and long symlinks only; Fill into a smaller one fails with
// ErrQuota). Hard links in /work are saved as independent files and count
// once each, as Fill will recreate them. Extents rather than st_blocks:
// st_blocks depends on the filesystem under the store (block size,
// compression, extent-tree blocks), extents do not. A tree also has an
// entry cap (Options.MaxEntries), and no path may pass MaxPath bytes.
//
// # Threats
//
// The program in the sandbox is hostile and controls every name, link,
// mode and file type in its /work; the trees in the store came from such
// programs. The supervisor must never follow a link out of a workspace:
// Judge0's did (CVE-2024-28185: it followed a symlink the sandbox
// planted and wrote a host file as root; CVE-2024-28189: it chown'd
// through one). Here:
//
//   - Paths from clients are validated first (cleanPath: relative or
//     under /work, no "..", no NUL, names of at most MaxName bytes).
//   - Every open beneath a workspace goes through openat2(2) with
//     RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV
//     and O_NOFOLLOW: no symlink anywhere in the path is followed, even
//     one that stays inside. Every other call (mkdirat, unlinkat,
//     fstatat, fchownat, utimensat, symlinkat, readlinkat, renameat2)
//     takes such a directory fd and a single name, without following it.
//     Never filepath.Join(root, userPath).
//   - Trees are walked and copied through directory fds, one name at a
//     time: symlinks are copied as symlinks (their targets are text),
//     hard links as independent files; FIFOs, sockets, device nodes and
//     mount points are skipped (and reported by Save).
//   - A file is read only if fstatat says it is regular, is then opened
//     with O_NOFOLLOW|O_NONBLOCK|O_NOCTTY, and fstat on the open fd must
//     show the same regular file: a FIFO can never block the server, a
//     device node is never opened (and the run's tmpfs is mounted nodev).
//   - Copies never trust the sizes they saw: they count entries and bytes
//     as they go and stop at the caps, copy a file up to the size they
//     saw first, and end when a file shrinks, so a tree that changes
//     meanwhile cannot make them loop or grow without bound.
//   - Written files keep only permission bits (no set-ID, no sticky bit)
//     and belong to the sandbox user (Options.UID/GID); the directories
//     above each tree are root's, mode 0700, so that user's host
//     processes, if any, cannot reach the trees.
//   - Errors name paths relative to /work, never host paths.
//
// Session ids carry 128 random bits and are checked for their exact form
// before they name anything on disk.
//
// Typical use, for a run (the caller mounts the tmpfs at work):
//
//	store, err := workspace.Open("/var/lib/sandcell/sessions", workspace.Options{UID: 101000, GID: 101000})
//	m, err := store.Create("python", 0)
//	ss, err := store.Get(m.ID) // errors.Is(err, workspace.ErrNotFound): unknown or expired
//	unlock, err := ss.Lock(ctx)
//	defer unlock()
//	err = ss.Fill(work)
//	// ... run the program with work as its /work, wait until it is dead ...
//	changes, skipped, err := ss.Save(work) // errors.Is(err, workspace.ErrQuota): the old tree stays
//
// This package works on Linux only (openat2 needs Linux 5.6).
package workspace
