# Host-wide kernel knobs that classic escapes write: core_pattern (a pipe
# handler runs as root on the host at the next crash), modprobe and
# uevent_helper (run as root by the kernel), sysrq-trigger (crash or reboot
# the host), panic_on_oom, and oom_score_adj -1000 (make the sandbox the
# OOM killer's last choice instead of its first). /proc/sys and
# sysrq-trigger are read-only, /sys is read-only, and lowering
# oom_score_adj needs CAP_SYS_RESOURCE. Opening for write is the test;
# nothing is written to the host knobs (": >" writes no byte).
for f in /proc/sys/kernel/core_pattern /proc/sys/kernel/modprobe /proc/sys/vm/panic_on_oom \
         /proc/sysrq-trigger /sys/kernel/uevent_helper /proc/sys/kernel/hostname \
         /sys/kernel/mm/transparent_hugepage/enabled /proc/sys/fs/binfmt_misc/register; do
  if ( : > "$f" ) 2>/dev/null; then echo "open $f for write ESCAPED"; else echo "write $f denied"; fi
done
# Under runc this is the host task's own score; gVisor keeps an emulated
# one (the host processes of the sandbox keep 1000), so "accepted" alone
# is not the escape: the runc expectation asks for "denied".
if echo -1000 > /proc/self/oom_score_adj 2>/dev/null; then echo "oom_score_adj -1000 accepted"; else echo "oom_score_adj -1000 denied"; fi
echo "oom_score_adj $(cat /proc/self/oom_score_adj)"
