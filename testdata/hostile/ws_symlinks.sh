# Supervisor attack through a session's workspace (Judge0
# CVE-2024-28185/28189: the supervisor followed a symlink the sandbox
# planted, and read, wrote and chowned host files through it). The program
# plants links to a host file and directory (HOST_CANARY, HOST_CANARY_DIR,
# never mounted), to /proc/self/root, to ".." and up out of /work, and a
# link where the next run's file will be written; hard links across mounts
# fail (EXDEV), inside /work they are just files. The test then uses the
# file tools and a second run on the saved workspace: nothing may read,
# write, delete or chown through a link (the host canary is checked).
cd /work || exit 1
ln -s "$HOST_CANARY" canary
ln -s "$HOST_CANARY_DIR" canarydir
ln -s /proc/self/root procroot
ln -s "/proc/self/root$HOST_CANARY" procroot-canary
ln -s "../../../../../../../../..$HOST_CANARY" climb
ln -s .. up
mkdir -p d && ln -s ../../../../../../.. d/up
ln -s "$HOST_CANARY" planted
echo inside > real && ln real hard
if ln /etc/passwd hard-etc 2>/dev/null; then echo "hard link across mounts ESCAPED"; else echo "hard link to /etc/passwd denied"; fi
cat canary 2>/dev/null && echo "canary readable in the sandbox ESCAPED"
ls -l /work | sed 1d | awk '{print $1, $9, $10, $11}'
