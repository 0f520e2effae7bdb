while :; do echo "flood line"; done
