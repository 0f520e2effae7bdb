# Terminal escape sequences (kubectl CVE-2021-25743): clear the screen and
# recolour, OSC 52 writes the user's clipboard (base64 of "ESCAPED"), OSC 8
# plants a hyperlink whose target is not the text shown, a DCS query, the
# 8-bit C1 CSI, a window title on stderr, and a carriage return that would
# hide "HIDDEN" on a terminal. All must be removed: only the visible text
# is left.
printf '\033[2J\033[31mRED\033[0m \033]52;c;RVNDQVBFRA==\a after-osc52 \033]8;;https://evil.example/x\033\\label\033]8;;\033\\ \033P+q544e\033\\ \302\233 2J c1 visible\rHIDDEN\n'
printf '\033]0;pwned title\a stderr \033[1;1H\n' >&2
