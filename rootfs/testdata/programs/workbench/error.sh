echo boom >&2
exit 3
