#!/usr/bin/env bash
# The cgroup v2 VM lane (make test-cgroupv2): boots Debian's own 6.1 kernel
# under qemu with software emulation (TCG; KVM hangs on our CI machines), on a
# busybox initramfs, with a pure cgroup2 hierarchy at /sys/fs/cgroup, and runs
# sandcell's cgroup, limit, isolation and teardown tests inside it. The host's
# cgroups are never touched.
#
# Shared read-only into the guest over virtio-9p: the repository (tests find
# ../testdata there), the static binaries built here (sandcell, oci.test,
# limits.test) and the language layers. The guest writes its logs to a fourth,
# writable share and ends the console with "SANDCELL-VM-EXIT=<status>", which
# this script turns into its own exit status.
#
# Everything it builds or downloads goes to the cache directory, never into
# the repository:
#   $SANDCELL_VM_CACHE   default /var/cache/sandcell-vm (root) or
#                        ${XDG_CACHE_HOME:-~/.cache}/sandcell-vm
#   $SANDCELL_VM_KERNEL  kernel package, default linux-image-6.1.0-57-amd64
#                        (the newest linux-image-6.1.0-N-amd64 if apt lacks it)
#   $SANDCELL_VM_TIMEOUT hard limit on the VM in seconds, default 1500
#   $SANDCELL_LAYER_DIR  sandcell home holding the layer store, default /var/lib/sandcell
#   $SANDCELL_VM_RUN / $SANDCELL_VM_SKIP override the guest's oci test
#                        selection (see guest/tests.sh)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PATH="$PATH:/usr/local/go/bin"
GO=${GO:-go}
LAYER_DIR=${SANDCELL_LAYER_DIR:-/var/lib/sandcell}
KERNEL_PKG=${SANDCELL_VM_KERNEL:-linux-image-6.1.0-57-amd64}
VM_TIMEOUT=${SANDCELL_VM_TIMEOUT:-1500}
if [ "$(id -u)" = 0 ]; then
	cache=${SANDCELL_VM_CACHE:-/var/cache/sandcell-vm}
else
	cache=${SANDCELL_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandcell-vm}
fi
# Modules the guest loads, in dependency order: virtio-pci and 9p over virtio
# (all modules in Debian's kernel), overlay for `sandcell doctor`, ext4 and
# loop for the live sandboxes' disks (crc32c first: ext4 and jbd2 look it up
# by name, and the guest has no modprobe), tun for the network policy.
MODULES="drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_legacy_dev
drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci net/9p/9pnet net/9p/9pnet_virtio
fs/netfs/netfs fs/fscache/fscache fs/9p/9p fs/overlayfs/overlay
crypto/crc32c_generic lib/crc16 fs/mbcache fs/jbd2/jbd2 fs/ext4/ext4 drivers/block/loop drivers/net/tun"

started=$SECONDS
say() { printf '[vm %3ds] %s\n' $((SECONDS - started)) "$*"; }
die() { say "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (sudo make test-cgroupv2): apt-get, and qemu must read the layers"
mkdir -p "$cache"
# One VM at a time on this machine (2 cores shared with everyone).
exec 9>"$cache/lock"
flock -w 900 9 || die "another VM lane holds $cache/lock"

# 1. Host packages: qemu, cpio, busybox (static, for the guest), e2fsprogs
# (its binaries are shared in for the live sandboxes' disks).
missing=
for p in qemu-system-x86 cpio busybox-static e2fsprogs; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
	say "installing:$missing"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	# shellcheck disable=SC2086 # a list of package names
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# 2. The kernel: downloaded with apt-get download, unpacked, never installed.
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }
kver=$(candidate "$KERNEL_PKG")
if [ -z "$kver" ] || [ "$kver" = "(none)" ]; then
	say "$KERNEL_PKG not in apt; looking for another 6.1 kernel"
	KERNEL_PKG=$(apt-cache pkgnames linux-image-6.1.0- | grep -E '^linux-image-6\.1\.0-[0-9]+-amd64$' | sort -V | tail -n 1)
	[ -n "$KERNEL_PKG" ] || die "no linux-image-6.1.0-N-amd64 package in apt"
	kver=$(candidate "$KERNEL_PKG")
fi
# The modules extracted are part of the key: a changed list extracts again.
kdir="$cache/kernel/${KERNEL_PKG}_${kver}_$(echo "$MODULES" | sha256sum | cut -c1-8)"
if [ ! -f "$kdir/ok" ]; then
	say "downloading $KERNEL_PKG $kver"
	rm -rf "$cache/kernel" "$cache/debs"
	mkdir -p "$cache/debs" "$kdir/x" "$kdir/modules"
	(cd "$cache/debs" && apt-get download -qq -o APT::Sandbox::User=root "$KERNEL_PKG=$kver")
	wanted=(--wildcards './boot/vmlinuz-*')
	for m in $MODULES; do wanted+=("./lib/modules/*/kernel/$m.ko"); done
	dpkg-deb --fsys-tarfile "$cache"/debs/*.deb | tar -x -C "$kdir/x" "${wanted[@]}"
	mv "$kdir"/x/boot/vmlinuz-* "$kdir/vmlinuz"
	mv "$kdir"/x/lib/modules/* "$kdir/modules"
	rm -rf "$kdir/x" "$cache/debs"
	touch "$kdir/ok"
fi
release=$(basename "$(find "$kdir/modules" -mindepth 1 -maxdepth 1 -type d)")

# 3. The initramfs: busybox, the two-stage init, the modules. Rebuilt when
# any of them changes; the test plan (guest/tests.sh) is read from the
# repository share at boot, so editing it needs no rebuild.
key=$( { cat /bin/busybox "$here/guest/init" "$here/guest/stage2" "$here/guest/inittab"; echo "$kdir $MODULES"; } | sha256sum | cut -c1-16)
initrd="$cache/initramfs/$key.cpio.gz"
if [ ! -f "$initrd" ]; then
	say "building initramfs $key"
	stage=$(mktemp -d "$cache/stage.XXXXXX")
	mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,etc,dev,proc,sys,run,tmp,newroot,guest,modules}
	cp /bin/busybox "$stage/bin/busybox"
	for a in $(/bin/busybox --list-full); do
		[ -e "$stage/$a" ] || ln -s /bin/busybox "$stage/$a"
	done
	mknod -m 600 "$stage/dev/console" c 5 1
	install -m 755 "$here/guest/init" "$stage/init"
	install -m 755 "$here/guest/stage2" "$stage/guest/stage2"
	install -m 644 "$here/guest/inittab" "$stage/etc/inittab"
	n=0
	for m in $MODULES; do
		n=$((n + 1))
		cp "$kdir/modules/$release/kernel/$m.ko" "$stage/modules/$(printf %02d $n)-$(basename "$m").ko"
	done
	rm -rf "$cache/initramfs" && mkdir -p "$cache/initramfs"
	(cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) >"$initrd.tmp"
	mv "$initrd.tmp" "$initrd"
	rm -rf "$stage"
fi

# 4. What the guest runs, all static: sandcell, the oci and limits test
# binaries, and the seccomp probe (the guest has no gcc; see guest/gcc).
bin="$cache/bin"
rm -rf "$bin" && mkdir -p "$bin"
say "building static binaries"
tags='seccomp netgo osusergo'
# The project's own targets: the static sandcell, and the sh and python
# layers if they are missing (both no-ops when up to date).
make -s -C "$repo" build layers LAYER_DIR="$LAYER_DIR"
cp "$repo/bin/sandcell" "$bin/sandcell"
# oci's container tests live with its backends (oci/backend); oci.test is
# that package's test binary.
for pkg in oci/backend limits; do
	name=$pkg; [ "$pkg" = oci/backend ] && name=oci
	(cd "$repo" && CGO_ENABLED=1 "$GO" test -c -tags "$tags" -ldflags '-extldflags=-static' -o "$bin/$name.test" "./$pkg")
done
mkdir -p "$bin/probes"
for src in "$repo"/testdata/probes/*.c; do
	gcc -static -O2 -o "$bin/probes/$(basename "$src" .c)" "$src"
done
install -m 755 "$here/guest/gcc" "$bin/gcc"
# e2fsprogs for the live sandboxes' disks (mkfs.ext4, e2fsck, resize2fs):
# the host's dynamic binaries with their libraries and loader, run through
# the loader by wrappers (the guest's userland is busybox, static).
mkdir -p "$bin/e2fs"
for b in mke2fs e2fsck resize2fs; do
	p=$(command -v "$b") || die "$b not found: apt-get install e2fsprogs"
	cp "$p" "$bin/e2fs/$b"
	ldd "$p" | awk '$3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | while read -r lib; do cp -L "$lib" "$bin/e2fs/"; done
done
cp /etc/mke2fs.conf "$bin/e2fs/mke2fs.conf"
for w in mkfs.ext4:mke2fs e2fsck:e2fsck resize2fs:resize2fs; do
	printf '#!/bin/sh\nexport MKE2FS_CONFIG=/vmbin/e2fs/mke2fs.conf\nexec /vmbin/e2fs/ld-linux-x86-64.so.2 --library-path /vmbin/e2fs --argv0 %s /vmbin/e2fs/%s "$@"\n' \
		"${w%%:*}" "${w#*:}" >"$bin/${w%%:*}"
	chmod 755 "$bin/${w%%:*}"
done
# runsc for oci's gvisor subtests, when the host has it (Debian's is static).
if r=$(command -v runsc) && ! ldd "$r" >/dev/null 2>&1; then
	cp "$r" "$bin/runsc"
fi

# 5. Boot. The console goes to a log file that is streamed here; timeout(1)
# bounds the VM, and only the qemu we started is ever signalled.
out="$cache/out"
rm -rf "$out" && mkdir -p "$out"
# The guest reads test selection overrides from here (quoted for sh).
{
	printf 'SANDCELL_VM_RUN=%q\n' "${SANDCELL_VM_RUN:-}"
	printf 'SANDCELL_VM_SKIP=%q\n' "${SANDCELL_VM_SKIP:-}"
} >"$out/selection.env"
logs="$cache/logs/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$logs"
# keep the last 10 runs' logs
find "$cache/logs" -mindepth 1 -maxdepth 1 -type d | sort | head -n -10 | xargs -r rm -rf
console="$logs/console.log"
say "booting $KERNEL_PKG $kver (TCG, timeout ${VM_TIMEOUT}s); console: $console"
# multidevs=remap: the layer store may hold mounts; keep their inode numbers apart.
share() { echo "local,path=$1,mount_tag=$2,security_model=none,multidevs=remap,id=$2${3:+,$3}"; }
qemu_args=(
	-accel tcg -cpu max -m 1024 -smp 2 -nographic -no-reboot -nic none
	-kernel "$kdir/vmlinuz" -initrd "$initrd"
	-append "console=ttyS0 quiet loglevel=3 panic=-1 cgroup_no_v1=all"
	-virtfs "$(share "$repo" src readonly=on)"
	-virtfs "$(share "$bin" vmbin readonly=on)"
	-virtfs "$(share "$LAYER_DIR" layers readonly=on)"
	-virtfs "$(share "$out" out)"
)
vm_start=$SECONDS
timeout --kill-after=10 "$VM_TIMEOUT" qemu-system-x86_64 "${qemu_args[@]}" </dev/null >"$console" 2>&1 &
qemu=$!
trap 'kill "$qemu" 2>/dev/null || true' EXIT INT TERM
tail -n +1 -f --pid="$qemu" "$console" 2>/dev/null || true
vm_rc=0
wait "$qemu" || vm_rc=$?
trap - EXIT INT TERM

cp -r "$out"/. "$logs"/ 2>/dev/null || true
status=$(sed -n 's/.*SANDCELL-VM-EXIT=\([0-9][0-9]*\).*/\1/p' "$console" | tail -n 1)
echo
if [ -f "$out/summary.txt" ]; then
	say "summary (from the guest):"
	sed 's/^/    /' "$out/summary.txt"
fi
say "VM ran $((SECONDS - vm_start))s; logs in $logs"
if [ "$vm_rc" = 124 ] || [ "$vm_rc" = 137 ]; then
	die "the VM did not finish within ${VM_TIMEOUT}s (timeout killed qemu)"
fi
[ -n "$status" ] || die "the guest reported no result (qemu exit $vm_rc); see $console"
if [ "$status" != 0 ]; then
	die "tests failed inside the cgroup v2 VM (guest status $status)"
fi
say "PASS: cgroup v2 lane, total $((SECONDS - started))s"
