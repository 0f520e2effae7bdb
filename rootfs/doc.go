// Package rootfs knows the languages sandcell runs and builds, caches and
// hands out their root filesystems.
//
// Invariant: a layer returned by Store.Root is complete and is never written
// to again, by a build or by a run. Every directory the runtime mounts onto
// (Mountpoints) already exists in it, so mounting never creates anything in
// a cached layer, and the runtime must mount the layer read-only.
//
// The catalogue of languages is data, languages.json, embedded in the
// binary: Lookup and Languages read it. A layer is built from Debian
// packages with mmdebstrap's extract variant (unpacked, no maintainer
// scripts run), then the language's setup steps run chrooted in it (the work
// maintainer scripts would have done), then the package finishes it:
//
//   - device nodes, the host's resolv.conf and hostname, and apt's state are
//     removed;
//   - /etc/passwd, /etc/group, /etc/nsswitch.conf, /etc/hosts and
//     /etc/hostname are written, naming the sandbox user (SandboxUID) and
//     nobody (65534);
//   - every file is made world-readable and every directory world-traversable,
//     and setuid/setgid bits are stripped, because programs run as an
//     unprivileged user in a user namespace, where the layer's host-owned
//     files belong to nobody.
//
// Threats: layers are built from signed Debian packages and so are not
// attacker-controlled, but the layer is later visible to untrusted programs
// (read-only). Writes into a layer during its build go through os.Root, so
// symlinks in packages (merged-usr's /bin -> usr/bin) resolve only within
// the layer, never onto the host; paths composed from the store directory
// go through filepath-securejoin. Setup steps run as root in a plain
// chroot(2), which root can leave: they are trusted catalogue data, exactly
// like the packages they run, never input from a request.
//
// Typical use:
//
//	lang, err := rootfs.Lookup("py")
//	store := &rootfs.Store{Dir: "/var/lib/sandcell/layers"}
//	root, err := store.Root(lang) // errors.Is(err, rootfs.ErrNotBuilt): run "sandcell build python"
//	// mount root read-only as the container's root; run lang.Run with lang.Env
package rootfs
