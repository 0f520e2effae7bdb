# Sparse giant files in a session's /work: "truncate -s 100G" is refused
# by the file-size rlimit (SIGXFSZ kills truncate: exit 153), a 60 MiB
# sparse file under the rlimit is allowed and costs no tmpfs page. Saving
# it must keep it sparse on the host (the test checks the blocks it uses),
# so a sparse file cannot fill the host disk.
cd /work || exit 1
truncate -s 100G huge
echo "truncate 100G exit $?"
truncate -s 60M sparse && echo "sparse 60M ok"
printf 'end' | dd of=sparse bs=1 seek=62914557 conv=notrunc 2>/dev/null
ls -ls /work | sed 1d | awk '{print "ls", $1, $6, $10}'
true
