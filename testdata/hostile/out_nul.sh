# NUL bytes and other C0 controls (BEL, BS, DEL, vertical tab, form feed)
# in the output: they are removed, newline and tab stay.
printf 'A\000B\000\000C\tT\aD\bE\177F\vG\fH\n'
printf 'E\000R\000R\n' >&2
