# Fills /tmp, /dev/shm and /work until the tmpfs size caps say ENOSPC.
# Each is a tmpfs sized by the run's tmpfs limit and charged to its memory
# cgroup, so none can reach the host's disk or memory. A file larger than
# the cap means a cap did not hold.
cap=$((24 * 1024 * 1024))
for d in /tmp /dev/shm /work; do
  dd if=/dev/zero of="$d/fill" bs=1048576 2>/dev/null
  size=$(stat -c %s "$d/fill")
  echo "FULL $d $size"
  [ "$size" -gt "$cap" ] && echo "$d grew past its cap ESCAPED"
done
df -k /tmp /dev/shm /work | sed 1d | awk '{print "df", $6, $2}'
exit 0
