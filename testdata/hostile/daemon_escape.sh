# Shell daemons that try to outlive the run: a double fork into a new
# session ignoring HUP/TERM/INT, and a nohup'ed background sleep. The
# script exits 0 at once; both must die with the run's pid namespace (the
# test checks the host for processes in the sandbox uid range).
( setsid sh -c 'trap "" HUP TERM INT; while :; do : > /tmp/alive; sleep 0.1; done' & )
nohup sh -c 'sleep 30; echo "nohup daemon outlived the run ESCAPED"' >/dev/null 2>&1 &
echo started
exit 0
