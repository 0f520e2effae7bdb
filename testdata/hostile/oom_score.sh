# The host's OOM killer must take a sandbox first: every process of a
# sandbox has oom_score_adj 1000, and a program must not lower it (to 0,
# or to a negative value a server was started with). The kernel lets a
# process lower its own score down to oom_score_adj_min, which only a
# writer with CAP_SYS_RESOURCE in the initial user namespace sets: runc
# writes 1000 from the host, but a server without that capability (a
# rootless one, or root on hosts that drop it) leaves the floor at its
# own value. So /proc is read-only in the sandbox.
start=$(cat /proc/self/oom_score_adj)
echo "start $start"
for v in 0 -500 -1000 999; do
  # In this shell, not a subshell: the write is this process's.
  if echo "$v" 2>/dev/null >/proc/self/oom_score_adj; then
    echo "write $v accepted, now $(cat /proc/self/oom_score_adj)"
  else
    echo "write $v refused"
  fi
done
if echo -17 2>/dev/null >/proc/self/oom_adj; then echo "oom_adj write accepted"; else echo "oom_adj write refused"; fi
if sh -c 'echo 0 >/proc/self/oom_score_adj' 2>/dev/null; then echo "child write accepted"; fi
now=$(cat /proc/self/oom_score_adj)
child=$(sh -c 'cat /proc/self/oom_score_adj')
# gVisor's /proc is its own kernel's (it shows 0 and changes nothing on
# the host): the check there is that nothing changes.
if [ "$now" = "$start" ] && [ "$child" = "$start" ]; then echo "score kept $start"; else echo "score changed from $start to $now (child $child) ESCAPED"; fi
