# The classic shell fork bomb in bash; the first shell then spins on a
# builtin, so the verdict comes from the wall clock or the pids limit.
exec 2>/dev/null
f() { f | f & }
f
while :; do :; done
