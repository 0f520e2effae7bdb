// Package rootfs knows the languages sandcell runs and builds, caches and
// hands out their root filesystems.
//
// Invariant: a layer is never written to once built, by a build or by a
// run. Programs see a language's layers only through a read-only overlay
// without an upper directory, whose top layer, the skeleton, holds every
// directory the runtime mounts onto (Mountpoints), so mounting never
// creates anything in a layer; per-run writes go to the run's own tmpfs.
// Verify re-hashes a layer to check it.
//
// The catalogue of languages is data, languages.json, embedded in the
// binary: Lookup and Languages read it. Each language names its Debian
// packages, source file, compile and run commands, environment and limit
// adjustments (Limits).
//
// A language's root is a stack of layers, top first:
//
//	skeleton   mountpoints, /etc/passwd, /etc/group, /etc/hosts... (written by this package)
//	language   the files of its packages that the layers below lack
//	[extends]  the layers of the language it extends (typescript on javascript, cpp and rust on c)
//	base       libc, libstdc++, openssl, CA certificates, busybox as /bin/sh... (shared by all)
//
// A package layer is built from Debian packages with mmdebstrap's extract
// variant (unpacked, no maintainer scripts run); then the recipe's links
// are made (the alternatives, /usr/bin/cc -> gcc) and its setup steps run
// chrooted in it (the work maintainer scripts would have done, such as
// byte-compiling Python's standard library); then it is trimmed
// (documentation, manual pages, translations), cleaned (device nodes, apt's
// state, the host's resolv.conf), normalised (every file world-readable,
// every directory world-traversable, no setuid or setgid bit: programs run
// as an unprivileged user in a user namespace, where the layer's host-owned
// files belong to nobody) and finally reduced to what the layers below it
// do not already hold identically.
//
// Layers are content-addressed: a layer's id hashes its recipe (packages,
// setup, links, trim, the ids of the layers below) and the package versions
// its build resolved. A build happens aside and is renamed into place; one
// builder per layer, across processes (flock); Prune removes what the
// catalogue no longer uses. See Store for the layout.
//
// Rootless: an unprivileged sandcell runs as root of a user namespace that
// maps only the user's own ids, with its own mount namespace. There the
// store works unchanged: it mounts roots (overlayfs with userxattr) and
// builds layers (mmdebstrap's root mode and chroot(2) as the namespace's
// root). Such a build cannot give files owners other than root (the
// namespace's one id): the few entries whose packages give them another
// owner are listed in Manifest.SquashedOwners, which is part of the
// layer's id; every other layer comes out identical to a root build. A
// rootless store may take layers read-only from a root-built one
// (Store.Shared), whose files it sees owned by nobody.
//
// Threats: layers are built from signed Debian packages and so are not
// attacker-controlled, but they are visible to untrusted programs
// (read-only; no setuid file, no device node). Writes into a layer during its build go
// through os.Root, so symlinks in packages resolve only within the layer,
// never onto the host. Setup steps run as root in a plain chroot(2), which
// root can leave: they are trusted catalogue data, exactly like the
// packages they run, never input from a request. (Rootless, that root is
// the user's own uid outside its namespace.) The mount table is read from
// /proc/thread-self, never /proc/self, whose view may be a container's
// (libcontainer moves threads of this process into containers' mount
// namespaces).
//
// Typical use:
//
//	lang, err := rootfs.Lookup("py")
//	store := &rootfs.Store{Dir: rootfs.DefaultDir()} // one per process: it caches mounted roots
//	// rootless: &rootfs.Store{Dir: userCache, Shared: []string{"/var/lib/sandcell"}}
//	root, err := store.Root(lang) // errors.Is(err, rootfs.ErrNotBuilt): run "sandcell rootfs build python"
//	// root is a read-only overlay: use it as the container's read-only root;
//	// compile with lang.Compile and lang.CompileLimits, run lang.Run with lang.Env and lang.Limits
package rootfs
