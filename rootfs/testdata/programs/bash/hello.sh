read -r line
if [[ -n "${line}" ]]; then echo "hello, ${line}"; fi
