# sandcell's bash context driver (package interp): cells run by eval in
# this one shell, so that variables, functions and the working directory
# stay from a cell to the next. Run by bash, or by the root's sh (busybox
# ash) where there is no bash: POSIX sh only.
#
# The protocol is python.py's (rootfs/kernels), but for the commands: a
# shell cannot read JSON, so interp sends each as one line of words,
#   run ID MARK CODE64 PROLOGUE64 EPILOGUE64
# MARK being the cell's end mark as a printf format (octal escapes),
# CODE64 the cell's code and PROLOGUE64 and EPILOGUE64 what sets and
# restores the cell's own environment variables, in base64 ("-": none).
# Replies and the ready message are JSON lines on fd 4; the mark follows
# each cell on stdout and stderr. A cell whose status is not 0 is an
# error (as Jupyter's bash kernel says it), named Error, valued by its
# status.
#
# Everything here runs inside the sandbox, with the user's code: interp
# trusts nothing it says.

__sandcell_n=0
# SIGINT (an interrupt) must not end the shell, which holds the state:
# interp interrupts the cell's commands themselves (pkill -INT -P). A
# handler, not an ignore, so that the cells' commands take SIGINT.
trap : INT
__sandcell_decode() {
	[ "$1" = - ] && return 0
	printf '%s' "$1" | base64 -d
}
printf '{"ready": true, "language": "bash", "pid": %d}\n' "$$" >&4
while IFS=' ' read -r __sandcell_op __sandcell_id __sandcell_mark __sandcell_code __sandcell_pro __sandcell_epi <&3; do
	[ "$__sandcell_op" = run ] || continue
	__sandcell_n=$((__sandcell_n + 1))
	eval "$(__sandcell_decode "$__sandcell_pro")"
	# The cell sees neither the command channel nor the reply channel.
	eval "$(__sandcell_decode "$__sandcell_code")" 3<&- 4>&-
	__sandcell_rc=$?
	eval "$(__sandcell_decode "$__sandcell_epi")"
	__sandcell_m1=true
	__sandcell_m2=true
	printf "$__sandcell_mark" || __sandcell_m1=false
	printf "$__sandcell_mark" >&2 || __sandcell_m2=false
	if [ "$__sandcell_rc" = 0 ]; then
		printf '{"id": %d, "status": "ok", "execution_count": %d, "marks": [%s, %s]}\n' \
			"$__sandcell_id" "$__sandcell_n" "$__sandcell_m1" "$__sandcell_m2" >&4
	else
		printf '{"id": %d, "status": "error", "execution_count": %d, "marks": [%s, %s], "error": {"type": "Error", "message": "exit status %d", "traceback": "the cell ended with exit status %d"}}\n' \
			"$__sandcell_id" "$__sandcell_n" "$__sandcell_m1" "$__sandcell_m2" "$__sandcell_rc" "$__sandcell_rc" >&4
	fi
done
