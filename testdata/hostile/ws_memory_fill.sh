# A session's /work is a tmpfs: its pages are memory, and they must be
# the run's. This run leaves 48 MiB there; the next runs of the session
# get them copied into their /work before they start, which used to be
# done by the server itself, charging the pages to the server: a run with
# a 32 MiB memory limit held them all and reported a peak of a few MiB.
dd if=/dev/zero of=/work/big bs=1048576 count=48 2>/dev/null && echo "48M written"
