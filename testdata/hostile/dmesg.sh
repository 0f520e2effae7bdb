# The kernel log leaks host activity and kernel addresses (a KASLR bypass):
# syslog(2) is denied by the filter, dmesg_restrict aside, /dev/kmsg is not
# in the sandbox and /proc/kmsg needs CAP_SYSLOG.
if dmesg 2>/dev/null | head -n 1 | grep -q .; then echo "dmesg readable ESCAPED"; else echo "dmesg denied"; fi
if head -c 1 /dev/kmsg >/dev/null 2>&1; then echo "/dev/kmsg readable ESCAPED"; else echo "/dev/kmsg denied"; fi
if timeout 1 head -c 1 /proc/kmsg >/dev/null 2>&1; then echo "/proc/kmsg readable ESCAPED"; else echo "/proc/kmsg denied"; fi
