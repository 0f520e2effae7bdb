# Device nodes: the sandbox gets null, zero, full, random, urandom and tty
# only; creating a node (mknod needs CAP_MKNOD) and opening one (/tmp,
# /work and /dev/shm are nodev) must fail, and so must opening host devices
# (memory, disks, kernel log, ports, kvm, tun, fuse).
echo "dev: $(ls /dev | tr '\n' ' ')"
for n in "mem c 1 1" "kmem c 1 2" "port c 1 4" "sda b 8 0" "vda b 254 0" "kmsg c 1 11" "tun c 10 200" "fuse c 10 229"; do
  set -- $n
  made=""
  for d in /tmp /work /dev/shm /dev; do
    if mknod "$d/$1" "$2" "$3" "$4" 2>/dev/null; then
      # A node that cannot be opened (nodev, or no such device) is inert;
      # one that reads is the escape.
      made="$made $d"
      head -c 16 "$d/$1" >/dev/null 2>&1 && echo "read $d/$1 ESCAPED"
    fi
  done
  if [ -z "$made" ]; then echo "mknod $1 denied"; else echo "mknod $1 created in$made"; fi
done
# nodev itself, with a harmless device (zero): a node that gets created
# here must not open.
if mknod /tmp/zero-probe c 1 5 2>/dev/null; then
  if head -c 1 /tmp/zero-probe >/dev/null 2>&1; then echo "zero node created in /tmp and opens: nodev not applied"; else echo "zero node created in /tmp, does not open"; fi
fi
for f in /dev/mem /dev/kmem /dev/port /dev/kmsg /dev/sda /dev/vda /dev/nvme0n1 /dev/kvm /dev/loop0 /dev/vsock /dev/vhost-vsock; do
  if head -c 1 "$f" >/dev/null 2>&1; then echo "read $f ESCAPED"; fi
done
# gVisor's /dev adds its TUN and FUSE devices: TUN must not be there (an
# empty read-only tmpfs covers /dev/net), FUSE must not open (a tmpfs of
# mode 000 covers /dev/fuse, issue #37).
if [ -e /dev/net/tun ]; then
  if (exec 3<>/dev/net/tun) 2>/dev/null; then echo "tun opens"; else echo "tun present, does not open"; fi
else
  echo "tun absent"
fi
if [ -e /dev/fuse ]; then
  if (exec 3<>/dev/fuse) 2>/dev/null; then echo "fuse opens"; else echo "fuse present, does not open"; fi
else
  echo "fuse absent"
fi
echo "devices done"
